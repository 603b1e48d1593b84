//! HTTP serving shared by the servers scratchfs runs (`scratchfs mcp --listen`, issue 31;
//! `scratchfs web`, issue 35; docs/security.md): a bearer token (RFC 6750) made at start or
//! read from a file, loopback as the only address served in clear text by default, TLS
//! from [`crate::tls`], and the bounds every connection is held to (handshake and header
//! times, an idle timeout, a number of connections at once).
//!
//! A token made at start is 32 random bytes from `/dev/urandom`, hex, written to a file of
//! mode 0600 in the user's runtime directory. Comparisons take the same time whatever
//! bytes differ.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Shortest token accepted from `--token-file`, in bytes (16).
pub const TOKEN_MIN: usize = 16;

/// The token of a server: read from `file` (its first line, trimmed; at least
/// [`TOKEN_MIN`] bytes), or made now and written to a new 0600 file
/// `PREFIX-PID.token` in `dir`, whose path is returned with it.
pub fn token(file: Option<&Path>, dir: &Path, prefix: &str) -> Result<(String, PathBuf), String> {
    if let Some(f) = file {
        let text =
            std::fs::read_to_string(f).map_err(|e| format!("--token-file {}: {e}", f.display()))?;
        let t = text.lines().next().unwrap_or("").trim().to_string();
        if t.len() < TOKEN_MIN || t.chars().any(|c| !c.is_ascii_graphic()) {
            return Err(format!(
                "--token-file {}: its first line must be a token of at least {TOKEN_MIN} \
                 printable characters without spaces",
                f.display()
            ));
        }
        return Ok((t, f.to_path_buf()));
    }
    let (t, _) = random_token()?;
    let path = dir.join(format!("{prefix}-{}.token", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("token file {}: {e}", path.display()))?;
    writeln!(f, "{t}").map_err(|e| format!("token file {}: {e}", path.display()))?;
    Ok((t, path))
}

/// 32 random bytes from `/dev/urandom`, as 64 hex digits (and the same as bytes).
pub fn random_token() -> Result<(String, [u8; 32]), String> {
    let mut raw = [0u8; 32];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").map_err(|e| format!("/dev/urandom: {e}"))?,
        &mut raw,
    )
    .map_err(|e| format!("/dev/urandom: {e}"))?;
    Ok((raw.iter().map(|b| format!("{b:02x}")).collect(), raw))
}

/// Whether `addr` is a loopback address (127.0.0.0/8, ::1): the only ones served in clear
/// text without `--allow-cleartext`.
pub fn loopback(addr: &std::net::SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// How long a client has to complete its TLS handshake after it connects (10 s): one that
/// opens TCP and says nothing is dropped then, not kept for good.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a client has to send a request's headers once it starts one (HTTP/1.1;
/// 30 s): a client that trickles them holds its connection no longer.
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Connections served at once (1,024); more wait in the kernel's accept queue.
pub const CONNECTIONS_MAX: usize = 1024;

/// Connections one source may hold at once (64): one local uid (a loopback peer, by the
/// owner of its socket), or one remote address. More are closed at once, so that a local
/// user who holds connections open (no token needed to open one) keeps no other user
/// out: the token holder's connections come from another uid, or at worst share its 64
/// with their own tabs (docs/security.md).
pub const CONNECTIONS_PER_SOURCE: usize = 64;

/// Who a connection comes from, for [`CONNECTIONS_PER_SOURCE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// A loopback peer whose socket belongs to this uid.
    Uid(u32),
    /// A loopback peer whose socket was not found (it closed already).
    UnknownLocal,
    /// A peer on the network, by address.
    Addr(std::net::IpAddr),
}

/// The source of a connection accepted at `local` from `peer`: for loopback, the uid that
/// owns the peer's socket, from `/proc/net/tcp` or `/proc/net/tcp6` (proc(5): the row
/// whose local address is the peer's and remote address ours).
pub fn source_of(local: std::net::SocketAddr, peer: std::net::SocketAddr) -> Source {
    if !peer.ip().is_loopback()
        && !matches!(peer.ip(), std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()))
    {
        return Source::Addr(peer.ip());
    }
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 7
                && proc_addr(f[1]) == Some(peer)
                && proc_addr(f[2]) == Some(local)
                && let Ok(uid) = f[7].parse()
            {
                return Source::Uid(uid);
            }
        }
    }
    Source::UnknownLocal
}

/// An address as `/proc/net/tcp{,6}` writes it: `0100007F:D439` (the IPv4 address as a
/// little-endian 32-bit word, then the port), or 32 hex digits of four such words (IPv6);
/// an IPv4-mapped IPv6 address is given as its IPv4 address.
fn proc_addr(s: &str) -> Option<std::net::SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |h: &str| u32::from_str_radix(h, 16).ok().map(u32::swap_bytes);
    let ip: std::net::IpAddr = match ip.len() {
        8 => std::net::Ipv4Addr::from(word(ip)?).into(),
        32 => {
            let mut octets = [0u8; 16];
            for i in 0..4 {
                octets[i * 4..i * 4 + 4]
                    .copy_from_slice(&word(&ip[i * 8..i * 8 + 8])?.to_be_bytes());
            }
            let v6 = std::net::Ipv6Addr::from(octets);
            match v6.to_ipv4_mapped() {
                Some(v4) => v4.into(),
                None => v6.into(),
            }
        }
        _ => return None,
    };
    Some(std::net::SocketAddr::new(ip, port))
}

/// The same address with an IPv4-mapped IPv6 address as its IPv4 address.
fn unmapped(a: std::net::SocketAddr) -> std::net::SocketAddr {
    match a.ip() {
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => std::net::SocketAddr::new(v4.into(), a.port()),
            None => a,
        },
        _ => a,
    }
}

/// One source's count of connections, given back when the connection ends.
struct Held {
    counts: Arc<std::sync::Mutex<std::collections::HashMap<Source, usize>>>,
    source: Source,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = c.get_mut(&self.source) {
            *n -= 1;
            if *n == 0 {
                c.remove(&self.source);
            }
        }
    }
}

/// How long a connection may stay with no byte moving either way while the server waits
/// for the client (60 s): one that connects and says nothing, or says nothing more after a
/// reply, is closed then. A stream of server-sent events stays open: rmcp writes a
/// keep-alive comment every 15 s, and each byte written starts the time again.
pub const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// A connection's bytes, closed ([`std::io::ErrorKind::TimedOut`] to the reader) when none
/// has moved either way for `limit` while a read waits ([`IDLE_TIMEOUT`]).
pub struct Idle<S> {
    inner: S,
    limit: std::time::Duration,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl<S> Idle<S> {
    /// `inner`, its time starting now.
    pub fn new(inner: S, limit: std::time::Duration) -> Self {
        Idle {
            inner,
            limit,
            deadline: Box::pin(tokio::time::sleep(limit)),
        }
    }

    fn moved(&mut self) {
        let at = tokio::time::Instant::now() + self.limit;
        self.deadline.as_mut().reset(at);
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Idle<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let before = buf.filled().len();
        match std::pin::Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.moved();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no byte moved for the idle timeout",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Idle<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, data);
        if let std::task::Poll::Ready(Ok(n)) = &r
            && *n > 0
        {
            self.moved();
        }
        r
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let std::task::Poll::Ready(Ok(n)) = &r
            && *n > 0
        {
            self.moved();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The TLS side of `--tls-cert CERT --tls-key KEY`: [`crate::tls::server_config`], offering
/// HTTP/2 and HTTP/1.1 by ALPN (RFC 7301). The error names the flag and file(s) at fault.
pub fn tls_acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, String> {
    use crate::tls::Error;
    let mut config = crate::tls::server_config(cert, key).map_err(|e| match &e {
        Error::Pair {
            cert: c,
            key: k,
            reason,
        } => format!(
            "--tls-key {} with --tls-cert {}: {reason}",
            k.display(),
            c.display()
        ),
        Error::NoCertificate { .. } => format!("--tls-cert {e}"),
        Error::NoKey { .. } => format!("--tls-key {e}"),
        Error::Read { path, .. } | Error::Pem { path, .. } if path == cert => {
            format!("--tls-cert {e}")
        }
        Error::Read { .. } | Error::Pem { .. } => format!("--tls-key {e}"),
    })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The server's side of a TLS handshake on `stream`, within [`HANDSHAKE_TIMEOUT`]; the
/// reason it failed otherwise (the client's alert, not TLS at all, the time ran out).
pub async fn handshake<IO>(
    acceptor: &tokio_rustls::TlsAcceptor,
    stream: IO,
) -> Result<tokio_rustls::server::TlsStream<IO>, String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(format!("TLS handshake: {e}")),
        Err(_) => Err(format!(
            "TLS handshake: not done within {} s",
            HANDSHAKE_TIMEOUT.as_secs()
        )),
    }
}

/// Whether `header` (an `Authorization` value) carries `token` (`Bearer TOKEN`, RFC 6750
/// section 2.1), compared in time that does not depend on where they differ.
pub fn bears(header: Option<&http::HeaderValue>, token: &str) -> bool {
    // The scheme's name is case-insensitive (RFC 9110 section 11.1).
    let Some(given) = header.and_then(|h| h.to_str().ok()).and_then(|h| {
        h.get(..7)
            .filter(|s| s.eq_ignore_ascii_case("bearer "))
            .map(|_| &h[7..])
    }) else {
        return false;
    };
    same_token(given.trim(), token)
}

/// Whether `given` is `token`, compared in time that does not depend on where they differ.
pub fn same_token(given: &str, token: &str) -> bool {
    let (a, b) = (given.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Serves `service` on every connection `listener` accepts (TLS first with `tls`), at most
/// [`CONNECTIONS_MAX`] at once (more wait in the kernel's queue), each bounded by
/// [`HANDSHAKE_TIMEOUT`], [`HEADER_READ_TIMEOUT`] and [`IDLE_TIMEOUT`]; HTTP/1.1 and
/// HTTP/2 (keep-alive pings: a peer that stops answering is dropped). Returns only when
/// accepting fails for good; `what` names the server in what it logs (`--listen ADDR`).
pub async fn serve<S, B>(
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    service: S,
    what: String,
) -> Result<(), String>
where
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto::Builder;
    /// A connection's byte stream, TCP or TLS over TCP.
    trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
    impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for T {}
    let mut builder = Builder::new(TokioExecutor::default());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Some(std::time::Duration::from_secs(30)))
        .keep_alive_timeout(std::time::Duration::from_secs(20));
    let builder = Arc::new(builder);
    let slots = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    let counts = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    let local = listener.local_addr().map_err(|e| format!("{what}: {e}"))?;
    loop {
        // At the bound, the next connection waits in the kernel's queue until one ends.
        let slot = slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| format!("{what}: {e}"))?;
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors, a connection reset before it was accepted: the
                // server goes on (after a pause, so that a lasting EMFILE does not spin).
                log::warn!("{what}: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        // Past its source's share, a connection is closed at once (before any byte of it
        // is read).
        let source = source_of(unmapped(local), unmapped(peer));
        let held = {
            let mut c = counts.lock().unwrap_or_else(|e| e.into_inner());
            let n = c.entry(source).or_insert(0);
            if *n >= CONNECTIONS_PER_SOURCE {
                log::info!("{what}: {peer} ({source:?}) holds {n} connections: closed");
                continue;
            }
            *n += 1;
            Held {
                counts: counts.clone(),
                source,
            }
        };
        let service = service.clone();
        let tls = tls.clone();
        let builder = builder.clone();
        let what = what.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let _held = held;
            let io: Box<dyn Stream> = match tls {
                None => Box::new(stream),
                // Each handshake in its own task and bounded in time: a client that fails
                // it, or opens TCP and says nothing, holds up no one else.
                Some(acceptor) => match handshake(&acceptor, stream).await {
                    Ok(s) => Box::new(s),
                    Err(e) => {
                        log::info!("{what}: {peer}: {e}");
                        return;
                    }
                },
            };
            // Closed when no byte moves either way for a minute while it waits for the
            // client: a silent connection does not keep its slot.
            let io = Idle::new(io, IDLE_TIMEOUT);
            let _ = builder.serve_connection(TokioIo::new(io), service).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_addresses_parse_and_a_loopback_peer_is_found_by_its_uid() {
        assert_eq!(
            proc_addr("0100007F:D439"),
            Some("127.0.0.1:54329".parse().unwrap())
        );
        assert_eq!(
            proc_addr("00000000000000000000000001000000:0050"),
            Some("[::1]:80".parse().unwrap())
        );
        assert_eq!(
            proc_addr("0000000000000000FFFF00000100007F:0050"),
            Some("127.0.0.1:80".parse().unwrap())
        );
        // A real loopback connection: its peer is this process's uid.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_s, peer) = l.accept().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        let me = unsafe { libc::geteuid() };
        assert_eq!(source_of(l.local_addr().unwrap(), peer), Source::Uid(me));
        let remote: std::net::SocketAddr = "10.1.2.3:5".parse().unwrap();
        assert_eq!(
            source_of(l.local_addr().unwrap(), remote),
            Source::Addr(remote.ip())
        );
    }

    #[test]
    fn only_the_exact_bearer_token_passes() {
        let t = "0123456789abcdef0123";
        let h = |s: &str| http::HeaderValue::from_str(s).unwrap();
        assert!(bears(Some(&h(&format!("Bearer {t}"))), t));
        assert!(
            bears(Some(&h(&format!("bearer {t}"))), t),
            "the scheme in any case"
        );
        for bad in [
            format!("Bearer {t}x"),
            format!("Bearer {}", &t[1..]),
            format!("Basic {t}"),
            t.to_string(),
            "Bearer ".into(),
        ] {
            assert!(!bears(Some(&h(&bad)), t), "{bad}");
        }
        assert!(!bears(None, t));
    }
}
