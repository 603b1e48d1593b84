//! Who may call `scratchfs mcp --listen` (issue 31, docs/security.md): a bearer token
//! (RFC 6750) on every request, and an address that does not put calls on a network in
//! clear text unless told so.
//!
//! The token is the one in `--token-file`, or one made at start (32 random bytes from
//! `/dev/urandom`, hex) and written to a file of mode 0600 in the user's runtime
//! directory, whose path the server prints on stderr. A request without
//! `Authorization: Bearer <token>` is answered `401 Unauthorized` with
//! `WWW-Authenticate: Bearer` and reaches no tool. The comparison takes the same time
//! whatever bytes differ.

use std::convert::Infallible;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};

/// Shortest token accepted from `--token-file`, in bytes (16).
pub const TOKEN_MIN: usize = 16;

/// The token of a server: read from `file` (its first line, trimmed; at least
/// [`TOKEN_MIN`] bytes), or made now and written to a new 0600 file in `dir`, whose path
/// is returned with it.
pub fn token(file: Option<&Path>, dir: &Path) -> Result<(String, PathBuf), String> {
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
    let mut raw = [0u8; 32];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").map_err(|e| format!("/dev/urandom: {e}"))?,
        &mut raw,
    )
    .map_err(|e| format!("/dev/urandom: {e}"))?;
    let t: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join(format!("mcp-http-{}.token", std::process::id()));
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

/// Whether `addr` is a loopback address (127.0.0.0/8, ::1): the only ones served in clear
/// text without `--allow-cleartext`.
pub fn loopback(addr: &std::net::SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// A service that passes a request on to `inner` only with the right bearer token.
#[derive(Clone)]
pub struct Authorized<S> {
    inner: S,
    token: Arc<str>,
}

impl<S> Authorized<S> {
    /// `inner`, behind `token`.
    pub fn new(inner: S, token: &str) -> Self {
        Authorized {
            inner,
            token: token.into(),
        }
    }
}

/// Whether `header` (an `Authorization` value) carries `token`, compared in time that does
/// not depend on where they differ.
fn bears(header: Option<&http::HeaderValue>, token: &str) -> bool {
    let Some(given) = header
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (a, b) = (given.trim().as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

type Reply = http::Response<BoxBody<Bytes, Infallible>>;

impl<S, B> tower_service::Service<http::Request<B>> for Authorized<S>
where
    S: tower_service::Service<http::Request<B>, Response = Reply, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Reply;
    type Error = Infallible;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<Reply, Infallible>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if !bears(req.headers().get(http::header::AUTHORIZATION), &self.token) {
            let body = Full::new(Bytes::from_static(
                b"401 Unauthorized: this MCP server needs Authorization: Bearer <token> \
                  (the token file it named at start, or its --token-file)\n",
            ))
            .boxed();
            let reply = http::Response::builder()
                .status(http::StatusCode::UNAUTHORIZED)
                .header(http::header::WWW_AUTHENTICATE, "Bearer")
                .header(http::header::CONTENT_TYPE, "text/plain")
                .body(body)
                .expect("a static response");
            return Box::pin(async move { Ok(reply) });
        }
        Box::pin(self.inner.call(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_passes() {
        let t = "0123456789abcdef0123";
        let h = |s: &str| http::HeaderValue::from_str(s).unwrap();
        assert!(bears(Some(&h(&format!("Bearer {t}"))), t));
        for bad in [
            format!("Bearer {t}x"),
            format!("Bearer {}", &t[1..]),
            format!("bearer {t}"),
            t.to_string(),
            "Bearer ".into(),
        ] {
            assert!(!bears(Some(&h(&bad)), t), "{bad}");
        }
        assert!(!bears(None, t));
    }
}
