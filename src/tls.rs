//! TLS with rustls (RFC 8446, TLS 1.3; and TLS 1.2, RFC 5246), ring as the crypto
//! provider: no OpenSSL, no aws-lc. It depends on nothing else in the crate, so every
//! transport that speaks TLS takes its configuration from here: `scratchfs mcp --listen
//! --tls-cert --tls-key` today (docs/security.md, "MCP over HTTP"), a PostgreSQL client
//! later.
//!
//! Files are PEM (RFC 7468), parsed by rustls-pki-types' `pem` module:
//! - a certificate file holds one or more `CERTIFICATE` sections: the server's own
//!   certificate first, then the intermediates that lead to the client's trust anchor
//!   (a chain, as TLS sends it: RFC 8446 §4.4.2); other sections are skipped;
//! - a key file holds the certificate's private key, the first of `PRIVATE KEY`
//!   (PKCS #8), `RSA PRIVATE KEY` (PKCS #1) or `EC PRIVATE KEY` (SEC1); an
//!   `ENCRYPTED PRIVATE KEY` is not read (there is no passphrase to ask for).
//!
//! Every error names the file (or both files) it is about.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why a TLS configuration could not be made. Each names its file(s); displayed as one
/// line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read (missing, a directory, permission denied).
    #[error("{}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS's reason.
        source: std::io::Error,
    },
    /// The file is not PEM the parser can read (a section without its end, bad base64).
    #[error("{}: not a PEM file: {reason}", .path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// The parser's reason.
        reason: String,
    },
    /// The certificate file holds no `CERTIFICATE` section.
    #[error("{}: no certificate in it (a PEM `BEGIN CERTIFICATE` section)", .path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The key file holds no private key rustls reads.
    #[error(
        "{}: no private key in it (a PEM `BEGIN PRIVATE KEY`, `BEGIN RSA PRIVATE KEY` or \
         `BEGIN EC PRIVATE KEY` section; an encrypted key is not read)",
        .path.display()
    )]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// rustls refused the pair: the key is not the certificate's (its public key is not
    /// the one the first certificate holds), or a key or certificate it cannot use.
    #[error("key {} with certificate {}: {reason}", .key.display(), .cert.display())]
    Pair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls' reason, made plain where it is a mismatch.
        reason: String,
    },
}

/// The crypto provider every configuration here uses: ring's, with rustls' default
/// cipher suites (TLS 1.3: AES-256-GCM, AES-128-GCM, ChaCha20-Poly1305; TLS 1.2: their
/// ECDHE forms) and key exchange groups (P-384, X25519, P-256) (rustls docs,
/// `crypto::ring::default_provider`).
///
/// rustls 0.23.48 deprecates this provider because ring has no post-quantum key exchange
/// (X25519MLKEM768, which its aws-lc-rs provider offers): a recording of today's traffic
/// could be decrypted by a future quantum computer. We take ring anyway, for a build
/// without cmake and a C toolchain for aws-lc (docs/security.md says so).
#[allow(deprecated)]
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of the PEM file `path`, in file order: a chain, the end entity's
/// first. [`Error::NoCertificate`] when it holds none.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, e))?;
    if certs.is_empty() {
        return Err(Error::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The first private key of the PEM file `path` (PKCS #8, PKCS #1 or SEC1).
/// [`Error::NoKey`] when it holds none.
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    let bytes = read(path)?;
    match PrivateKeyDer::from_pem_slice(&bytes) {
        Ok(key) => Ok(key),
        Err(rustls_pki_types::pem::Error::NoItemsFound) => Err(Error::NoKey {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(pem_error(path, e)),
    }
}

/// A server configuration presenting the chain in `cert` with the key in `key`: TLS 1.3
/// and 1.2 on ring, no client certificates, no ALPN (the caller sets
/// `alpn_protocols`). rustls checks that the key is the certificate's
/// (`ConfigBuilder::with_single_cert`); a mismatch is [`Error::Pair`], naming both files.
pub fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, Error> {
    let chain = certificates(cert)?;
    let secret = private_key(key)?;
    let pair = |reason: String| Error::Pair {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        reason,
    };
    rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| pair(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, secret)
        .map_err(|e| {
            pair(match e {
                rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
                    "the private key is not the key of the certificate (the first in the \
                     certificate file)"
                        .to_string()
                }
                other => other.to_string(),
            })
        })
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn pem_error(path: &Path, e: rustls_pki_types::pem::Error) -> Error {
    match e {
        rustls_pki_types::pem::Error::Io(source) => Error::Read {
            path: path.to_path_buf(),
            source,
        },
        other => Error::Pem {
            path: path.to_path_buf(),
            reason: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate for localhost and its key, as PEM.
    fn pair() -> (String, String) {
        let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        (c.cert.pem(), c.signing_key.serialize_pem())
    }

    fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn a_chain_and_its_key_make_a_server_config() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair();
        let (other, _) = pair();
        // The chain: the end entity first, then another certificate; text around the
        // sections is skipped.
        let chain = file(
            dir.path(),
            "chain.pem",
            &format!("leaf:\n{cert}intermediate:\n{other}"),
        );
        let key = file(dir.path(), "key.pem", &key);
        assert_eq!(certificates(&chain).unwrap().len(), 2);
        server_config(&chain, &key).unwrap();
    }

    #[test]
    fn each_bad_file_is_named_with_its_fault() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair();
        let (other_cert, _) = pair();
        let cert_f = file(dir.path(), "cert.pem", &cert);
        let key_f = file(dir.path(), "key.pem", &key);
        let other_f = file(dir.path(), "other.pem", &other_cert);
        let missing = dir.path().join("missing.pem");
        let empty = file(dir.path(), "empty.pem", "no PEM here\n");
        let broken = file(
            dir.path(),
            "broken.pem",
            "-----BEGIN CERTIFICATE-----\nMIIB\n",
        );
        let shown = |r: Result<rustls::ServerConfig, Error>| r.unwrap_err().to_string();
        let e = shown(server_config(&missing, &key_f));
        assert!(
            e.starts_with(&format!("{}: ", missing.display())) && e.contains("No such file"),
            "{e}"
        );
        let e = shown(server_config(&cert_f, &missing));
        assert!(e.starts_with(&missing.display().to_string()), "{e}");
        let e = shown(server_config(&empty, &key_f));
        assert!(e.contains("empty.pem: no certificate in it"), "{e}");
        // A certificate file given as the key, and a key file given as the certificate.
        let e = shown(server_config(&cert_f, &cert_f));
        assert!(e.contains("cert.pem: no private key in it"), "{e}");
        let e = shown(server_config(&key_f, &key_f));
        assert!(e.contains("key.pem: no certificate in it"), "{e}");
        let e = shown(server_config(&broken, &key_f));
        assert!(e.contains("broken.pem: not a PEM file"), "{e}");
        // Another certificate than the key's: both files named.
        let e = shown(server_config(&other_f, &key_f));
        assert!(
            e.contains("key.pem") && e.contains("other.pem") && e.contains("not the key of"),
            "{e}"
        );
    }
}
