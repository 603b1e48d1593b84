//! TLS to the PostgreSQL server (issue 34): libpq's `sslmode`, `sslrootcert`, `sslcert` and
//! `sslkey` (in the URL, or `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`; the URL
//! wins), on rustls with ring ([`crate::tls::provider`]) through `tokio-postgres-rustls`.
//! The meaning of each mode is libpq's (PostgreSQL docs, "SSL Support", table "SSL Mode
//! Descriptions"):
//!
//! | `sslmode`     | encrypted            | server certificate checked                  |
//! |---------------|----------------------|---------------------------------------------|
//! | `disable`     | no                   | -                                           |
//! | `prefer`      | if the server offers | as `require`                                |
//! | `require`     | yes                  | not at all, unless a root certificate is given: then as `verify-ca` (libpq's rule, kept for compatibility) |
//! | `verify-ca`   | yes                  | signed by a CA in `sslrootcert`             |
//! | `verify-full` | yes                  | signed so, and valid for the host name (or IP address) connected to |
//!
//! `prefer` is the default, as in libpq. `sslrootcert` is a PEM file of CA certificates,
//! or `system` for the operating system's (then only `verify-full` is allowed, as libpq 16
//! has it); unset, `~/.postgresql/root.crt` is used if it exists, and `verify-ca` or
//! `verify-full` without any root certificate is refused before connecting. `sslcert` and
//! `sslkey` are the client's certificate chain and key (PEM, [`crate::tls`] reads them),
//! default `~/.postgresql/postgresql.crt` and `.key` when both exist; a key file readable by
//! group or others is refused, as libpq refuses it (0600 or less, or 0640 if owned by
//! root). Channel binding (`SCRAM-SHA-256-PLUS`) comes with `tokio-postgres-rustls`.
//!
//! libpq's other TLS parameters (`sslcrl`, `sslcrldir`, `sslpassword`, `sslsni`,
//! `sslcertmode`, `ssl_min_protocol_version`, `ssl_max_protocol_version`, `sslcompression`)
//! are refused by name as not supported (`EINVAL`), never ignored.
//!
//! Errors: a file that is missing or unreadable, or holds no certificate or key, is
//! `EINVAL` naming the file and the parameter it came from; a server refused by the checks
//! above is `EACCES` saying which check ([`explain`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::store::error::{ErrorKind, StoreError};

type Result<T> = std::result::Result<T, StoreError>;

/// libpq's `sslmode` values this client knows (`allow` is not one: it would try plain
/// text first, which a careful client does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Plain text only.
    Disable,
    /// TLS if the server offers it, else plain text.
    Prefer,
    /// TLS; the certificate is not checked unless a root certificate is given.
    Require,
    /// TLS; the certificate must chain to a root certificate.
    VerifyCa,
    /// TLS; as `VerifyCa`, and valid for the host name.
    VerifyFull,
}

impl Mode {
    fn parse(value: &str, from: &str) -> Result<Mode> {
        Ok(match value {
            "disable" => Mode::Disable,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            other => {
                return Err(invalid(format!(
                    "{from} {other:?} is not a sslmode this client supports (disable, \
                     prefer, require, verify-ca, verify-full)"
                )));
            }
        })
    }

    /// libpq's name of the mode.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres is told: whether TLS is tried and whether it is required (the
    /// checks are the rustls configuration's).
    pub fn ssl_mode(self) -> SslMode {
        match self {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }
}

/// Where a root certificate store comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    /// A PEM file, and the parameter that named it (`sslrootcert`, `PGSSLROOTCERT`, or
    /// the default path).
    File(PathBuf, &'static str),
    /// The operating system's store (`sslrootcert=system`).
    System,
}

/// The TLS settings of one URL, with the files not read yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The mode.
    pub mode: Mode,
    roots: Option<Roots>,
    client: Option<(PathBuf, PathBuf)>,
}

/// The TLS parameters libpq has and this client does not: refused by name.
const UNSUPPORTED: &[&str] = &[
    "sslcrl",
    "sslcrldir",
    "sslpassword",
    "sslsni",
    "sslcertmode",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "sslcompression",
];

/// The parameters this module reads (and removes from what tokio-postgres parses).
const OURS: &[&str] = &["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// Whether parameter `k` is removed from what tokio-postgres parses: TLS's, the pooler's
/// ([`super::pooler::PARAMS`]), and `options` through a pooler (which refuses it at
/// login: its `-c` settings are set in each transaction instead, [`super::pooler`]).
fn stripped(k: &str, pooled: bool) -> bool {
    OURS.contains(&k) || super::pooler::PARAMS.contains(&k) || (pooled && k == "options")
}

/// The value of parameter `name` in `params`, the last one given (as libpq reads a
/// parameter given twice).
pub fn last<'p>(params: &'p [(String, String)], name: &str) -> Option<&'p str> {
    params
        .iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Every parameter of `url` (a `postgres://` URL or a `key=value` string), decoded, in
/// order: what [`super::pooler`] reads.
pub fn params(url: &str) -> Vec<(String, String)> {
    if super::store::is_url(url) {
        split_url(url, false).1
    } else {
        split_key_values(url, false).1
    }
}

/// Splits the TLS parameters off `url` (a `postgres://` URL or a `key=value` string):
/// returns the rest, for tokio-postgres to parse, and the settings they and the
/// environment (`env`, libpq's `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`) give.
/// `home` is the directory whose `.postgresql/` holds the default files. `EINVAL` for a
/// bad value or an unsupported parameter, naming it.
pub fn split(
    url: &str,
    env: impl Fn(&str) -> Option<String>,
    home: Option<&Path>,
) -> Result<(String, Settings)> {
    let pooled = params(url).iter().any(|(k, _)| k == "pooler");
    let (rest, params) = if super::store::is_url(url) {
        split_url(url, pooled)
    } else {
        split_key_values(url, pooled)
    };
    let param = |name: &str| last(&params, name).map(str::to_owned);
    for (k, _) in &params {
        if UNSUPPORTED.contains(&k.as_str()) {
            return Err(invalid(format!(
                "the PostgreSQL parameter {k} is not supported by this client (its TLS \
                 takes sslmode, sslrootcert, sslcert and sslkey)"
            )));
        }
    }
    let env = |k: &str| env(k).filter(|v| !v.is_empty());
    let mode = match (param("sslmode"), env("PGSSLMODE")) {
        (Some(v), _) => Mode::parse(&v, "sslmode")?,
        (None, Some(v)) => Mode::parse(&v, "PGSSLMODE")?,
        (None, None) => Mode::Prefer,
    };
    let default = |name: &str| home.map(|h| h.join(".postgresql").join(name));
    let roots = match (param("sslrootcert"), env("PGSSLROOTCERT")) {
        (Some(v), _) => Some(roots_of(v, "sslrootcert")),
        (None, Some(v)) => Some(roots_of(v, "PGSSLROOTCERT")),
        (None, None) => default("root.crt")
            .filter(|p| p.exists())
            .map(|p| Roots::File(p, "the default root certificate")),
    };
    if roots == Some(Roots::System) && mode != Mode::VerifyFull && mode != Mode::Disable {
        return Err(invalid(format!(
            "sslrootcert=system needs sslmode=verify-full, not {} (libpq's rule: the system's \
             CAs vouch for any name they signed)",
            mode.name()
        )));
    }
    if roots.is_none() && matches!(mode, Mode::VerifyCa | Mode::VerifyFull) {
        return Err(invalid(format!(
            "sslmode={} needs a root certificate: set sslrootcert (a PEM file of CA \
             certificates, or system) or PGSSLROOTCERT, or put it in ~/.postgresql/root.crt",
            mode.name()
        )));
    }
    let cert = param("sslcert")
        .map(|v| (PathBuf::from(v), "sslcert"))
        .or_else(|| env("PGSSLCERT").map(|v| (PathBuf::from(v), "PGSSLCERT")));
    let key = param("sslkey")
        .map(|v| (PathBuf::from(v), "sslkey"))
        .or_else(|| env("PGSSLKEY").map(|v| (PathBuf::from(v), "PGSSLKEY")));
    let client = match (cert, key) {
        (Some((c, _)), Some((k, _))) => Some((c, k)),
        (Some((_, from)), None) | (None, Some((_, from))) => {
            return Err(invalid(format!(
                "{from} is set without its pair: a client certificate needs both sslcert and \
                 sslkey (or PGSSLCERT and PGSSLKEY)"
            )));
        }
        (None, None) => match (default("postgresql.crt"), default("postgresql.key")) {
            (Some(c), Some(k)) if c.exists() && k.exists() => Some((c, k)),
            _ => None,
        },
    };
    Ok((
        rest,
        Settings {
            mode,
            roots,
            client,
        },
    ))
}

fn roots_of(value: String, from: &'static str) -> Roots {
    if value == "system" {
        Roots::System
    } else {
        Roots::File(PathBuf::from(value), from)
    }
}

fn invalid(what: String) -> StoreError {
    StoreError::new(ErrorKind::Invalid, what)
}

/// The query of a URL (after the first `?` past the credentials, as tokio-postgres
/// reads it), split: the URL without our parameters, and every parameter
/// (percent-decoded) in order.
fn split_url(url: &str, pooled: bool) -> (String, Vec<(String, String)>) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let creds_end = url[after_scheme..]
        .find('@')
        .map_or(after_scheme, |i| after_scheme + i + 1);
    let Some(q) = url[creds_end..].find('?').map(|i| creds_end + i) else {
        return (url.to_owned(), Vec::new());
    };
    let mut kept = Vec::new();
    let mut params = Vec::new();
    for pair in url[q + 1..].split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (percent_decode(k), percent_decode(v));
        if !stripped(&k, pooled) {
            kept.push(pair);
        }
        params.push((k, v));
    }
    let mut rest = url[..q].to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    (rest, params)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `key=value` connection string (libpq's syntax: values unquoted up to white space,
/// or in single quotes; `\` escapes the next character), split as [`split_url`] splits a
/// URL's query. A string that does not follow the syntax is returned whole, for
/// tokio-postgres to refuse with its message.
fn split_key_values(s: &str, pooled: bool) -> (String, Vec<(String, String)>) {
    let b = s.as_bytes();
    let mut i = 0;
    let mut kept = Vec::new();
    let mut params = Vec::new();
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    loop {
        skip_ws(&mut i);
        if i >= b.len() {
            break;
        }
        let start = i;
        while i < b.len() && b[i] != b'=' && !b[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = &s[start..i];
        skip_ws(&mut i);
        if i >= b.len() || b[i] != b'=' {
            return (s.to_owned(), Vec::new());
        }
        i += 1;
        skip_ws(&mut i);
        let mut value = Vec::new();
        if i < b.len() && b[i] == b'\'' {
            i += 1;
            loop {
                match b.get(i) {
                    None => return (s.to_owned(), Vec::new()),
                    Some(b'\'') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') if i + 1 < b.len() => {
                        value.push(b[i + 1]);
                        i += 2;
                    }
                    Some(&c) => {
                        value.push(c);
                        i += 1;
                    }
                }
            }
        } else {
            while i < b.len() && !b[i].is_ascii_whitespace() {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                }
                value.push(b[i]);
                i += 1;
            }
        }
        if !stripped(key, pooled) {
            kept.push(&s[start..i]);
        }
        params.push((key.to_owned(), String::from_utf8_lossy(&value).into_owned()));
    }
    (kept.join(" "), params)
}

/// The connector for `settings`: reads the root and client certificate files now, so
/// that a missing or unreadable one fails before any connection (`EINVAL`, naming it).
pub fn connector(settings: &Settings) -> Result<MakeRustlsConnect> {
    let provider = crate::tls::provider();
    let verifier: Arc<dyn ServerCertVerifier> = match (&settings.roots, settings.mode) {
        (_, Mode::Disable) | (None, _) => Arc::new(Unchecked(provider.clone())),
        (Some(roots), mode) => {
            let store = root_store(roots)?;
            let webpki =
                WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
                    .build()
                    .map_err(|e| invalid(format!("the root certificates: {e}")))?;
            if mode == Mode::VerifyFull {
                webpki
            } else {
                Arc::new(AnyName(webpki))
            }
        }
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::failed(format!("TLS versions: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match &settings.client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            check_key_mode(key)?;
            let chain =
                crate::tls::certificates(cert).map_err(|e| invalid(format!("sslcert: {e}")))?;
            let secret =
                crate::tls::private_key(key).map_err(|e| invalid(format!("sslkey: {e}")))?;
            builder.with_client_auth_cert(chain, secret).map_err(|e| {
                invalid(format!(
                    "sslkey {} with sslcert {}: {}",
                    key.display(),
                    cert.display(),
                    match e {
                        rustls::Error::InconsistentKeys(_) => {
                            "the key is not the certificate's".to_owned()
                        }
                        other => other.to_string(),
                    }
                ))
            })?
        }
    };
    // PostgreSQL 17's direct TLS (`sslnegotiation=direct`) requires this ALPN name; older
    // servers ignore it.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(MakeRustlsConnect::new(config))
}

fn root_store(roots: &Roots) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::File(path, from) => {
            let certs =
                crate::tls::certificates(path).map_err(|e| invalid(format!("{from}: {e}")))?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(invalid(format!(
                    "{from}: {}: no CA certificate in it that rustls can use",
                    path.display()
                )));
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err(invalid(format!(
                    "sslrootcert=system: the operating system's CA certificates were not \
                     found ({})",
                    found
                        .errors
                        .first()
                        .map_or("no file".to_owned(), |e| e.to_string())
                )));
            }
        }
    }
    Ok(store)
}

/// libpq's rule for a client key file: no access for others, none for the group unless
/// the file is root's and only readable by the group (0640).
fn check_key_mode(key: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta =
        std::fs::metadata(key).map_err(|e| invalid(format!("sslkey: {}: {e}", key.display())))?;
    let mode = meta.mode() & 0o777;
    let ok = if meta.uid() == 0 {
        mode & 0o037 == 0
    } else {
        mode & 0o077 == 0
    };
    if !ok {
        return Err(invalid(format!(
            "sslkey: {}: has group or world access (mode {mode:04o}); it must be 0600 or \
             less, or 0640 or less if owned by root",
            key.display()
        )));
    }
    Ok(())
}

/// `require`'s check: none of the certificate (libpq's `require` without a root
/// certificate), but the handshake's signatures are still verified, so the session is
/// with whoever holds the certificate's key.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`'s check: webpki's, with a certificate that is not valid for the name
/// accepted (webpki checks the chain before the name, so an error about the name means
/// the chain was good).
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// A connection error that TLS explains, as the kind and reason the store reports (the
/// caller prefixes the server), or `None` for any other: a server that does not offer
/// TLS when `settings` require it, and each way rustls refuses the server's certificate
/// (`EACCES`: this client refused the server).
pub fn explain(e: &tokio_postgres::Error, settings: &Settings, host: &str) -> Option<StoreError> {
    let denied = |s: String| Some(StoreError::new(ErrorKind::Denied, s));
    let mode = settings.mode.name();
    if chain(e).any(|c| c.to_string().contains("server does not support TLS")) {
        return denied(format!(
            "the server does not offer TLS, and sslmode={mode} requires it (nothing was sent \
             in plain text)"
        ));
    }
    let rustls_error = chain(e).find_map(|c| c.downcast_ref::<rustls::Error>())?;
    let roots = match &settings.roots {
        Some(Roots::File(p, from)) => format!("{from} {}", p.display()),
        Some(Roots::System) => "the system's CA certificates".to_owned(),
        None => "no root certificate".to_owned(),
    };
    match rustls_error {
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => denied(format!(
            "the server's certificate is not valid for the host name {host:?} (sslmode={mode} \
             checks the name; its certificate is signed by a CA in {roots})"
        )),
        rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        ) => denied(format!(
            "the server's certificate is not signed by a CA in {roots} (sslmode={mode})"
        )),
        rustls::Error::InvalidCertificate(other) => denied(format!(
            "the server's certificate is refused (sslmode={mode}): {other:?}"
        )),
        other => denied(format!(
            "TLS with the server failed (sslmode={mode}): {other}"
        )),
    }
}

/// `e` and its causes, looking inside `io::Error`s (whose `source` skips the error they
/// wrap).
fn chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    let mut next = Some(e);
    std::iter::from_fn(move || {
        let cur = next?;
        next = match cur
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => cur.source(),
        };
        Some(cur)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn our_parameters_are_split_off_a_url_and_the_rest_is_kept() {
        let (rest, s) = split(
            "postgres://u:p%3Fw@h:5/d?application_name=x&sslmode=verify-full&sslrootcert=%2Fca%20dir%2Fca.crt&connect_timeout=3",
            none,
            None,
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgres://u:p%3Fw@h:5/d?application_name=x&connect_timeout=3"
        );
        assert_eq!(s.mode, Mode::VerifyFull);
        assert_eq!(
            s.roots,
            Some(Roots::File("/ca dir/ca.crt".into(), "sslrootcert"))
        );
        let (rest, s) = split("postgres://h/d?sslmode=require", none, None).unwrap();
        assert_eq!(rest, "postgres://h/d");
        assert_eq!((s.mode, s.roots, s.client), (Mode::Require, None, None));
    }

    #[test]
    fn our_parameters_are_split_off_a_key_value_string() {
        let (rest, s) = split(
            "host=h  sslmode = 'verify-ca' sslrootcert='/a b/c\\'s.crt' dbname=d sslcert=/c sslkey=/k",
            none,
            None,
        )
        .unwrap();
        assert_eq!(rest, "host=h dbname=d");
        assert_eq!(s.mode, Mode::VerifyCa);
        assert_eq!(
            s.roots,
            Some(Roots::File("/a b/c's.crt".into(), "sslrootcert"))
        );
        assert_eq!(s.client, Some(("/c".into(), "/k".into())));
    }

    #[test]
    fn the_url_wins_and_the_environment_fills_in() {
        let env = |k: &str| match k {
            "PGSSLMODE" => Some("verify-full".to_owned()),
            "PGSSLROOTCERT" => Some("/env/ca.crt".to_owned()),
            _ => None,
        };
        let (_, s) = split("postgres://h/d?sslmode=verify-ca", env, None).unwrap();
        assert_eq!(s.mode, Mode::VerifyCa);
        assert_eq!(
            s.roots,
            Some(Roots::File("/env/ca.crt".into(), "PGSSLROOTCERT"))
        );
        let (_, s) = split("postgres://h/d", env, None).unwrap();
        assert_eq!(s.mode, Mode::VerifyFull);
        let (_, s) = split("postgres://h/d", none, None).unwrap();
        assert_eq!(s.mode, Mode::Prefer);
    }

    #[test]
    fn bad_tls_input_is_refused_by_name() {
        let e = split("postgres://h/d?sslmode=verify-full", none, None).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Invalid);
        assert!(e.reason.contains("needs a root certificate"), "{e}");
        let e = split("postgres://h/d?sslmode=allow", none, None).unwrap_err();
        assert!(e.reason.contains("\"allow\""), "{e}");
        let e = split("postgres://h/d?sslcrl=/x", none, None).unwrap_err();
        assert!(e.reason.contains("sslcrl is not supported"), "{e}");
        let e = split("postgres://h/d?sslcert=/c", none, None).unwrap_err();
        assert!(e.reason.contains("sslcert is set without its pair"), "{e}");
        let e = split(
            "postgres://h/d?sslmode=require&sslrootcert=system",
            none,
            None,
        )
        .unwrap_err();
        assert!(e.reason.contains("needs sslmode=verify-full"), "{e}");
        let s = split(
            "postgres://h/d?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt",
            none,
            None,
        )
        .unwrap()
        .1;
        let Err(e) = connector(&s) else {
            panic!("a missing sslrootcert was read")
        };
        assert_eq!(e.kind, ErrorKind::Invalid);
        assert!(e.reason.contains("sslrootcert: /nonexistent/ca.crt"), "{e}");
    }

    #[test]
    fn the_default_files_are_used_when_present() {
        let home = std::env::temp_dir().join(format!("scratchfs-pgtls-{}", std::process::id()));
        let dir = home.join(".postgresql");
        std::fs::create_dir_all(&dir).unwrap();
        let (_, s) = split("postgres://h/d", none, Some(&home)).unwrap();
        assert_eq!((s.roots.clone(), s.client.clone()), (None, None));
        for f in ["root.crt", "postgresql.crt", "postgresql.key"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        let (_, s) = split("postgres://h/d?sslmode=verify-ca", none, Some(&home)).unwrap();
        assert_eq!(
            s.roots,
            Some(Roots::File(
                dir.join("root.crt"),
                "the default root certificate"
            ))
        );
        assert_eq!(
            s.client,
            Some((dir.join("postgresql.crt"), dir.join("postgresql.key")))
        );
        std::fs::remove_dir_all(&home).unwrap();
    }
}
