//! Who may call `scratchfs mcp --listen` (issue 31, docs/security.md): a bearer token
//! (RFC 6750) on every request ([`crate::http`]), and an address that does not put calls
//! on a network in clear text unless told so: HTTPS with `--tls-cert` and `--tls-key`, or
//! `--allow-cleartext`. A request without `Authorization: Bearer <token>` is answered
//! `401 Unauthorized` with `WWW-Authenticate: Bearer` and reaches no tool.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};

use crate::http::bears;

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
        // A session's end (DELETE, 2025-11-25 "Session Management") is answered 200:
        // rmcp says 202, which the SDKs read as a failure ("Session termination failed:
        // 202").
        let delete = req.method() == http::Method::DELETE;
        let reply = self.inner.call(req);
        Box::pin(async move {
            let mut reply = reply.await?;
            if delete && reply.status() == http::StatusCode::ACCEPTED {
                *reply.status_mut() = http::StatusCode::OK;
            }
            Ok(reply)
        })
    }
}
