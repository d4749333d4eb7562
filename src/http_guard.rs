//! What agentsim's HTTP servers let in (`agentsim serve`, and mock-llm's `/_agentsim/*` control
//! routes), so that a web page in the user's browser cannot drive them:
//!
//! - the `Host` a request names must be the server's: a loopback name (`localhost`, any loopback
//!   address), the address it is bound to (any IP address when it is bound to all of them), or a
//!   name of the allow-list: a page that rebinds its own DNS name to 127.0.0.1 sends its own name
//!   and is refused (400);
//! - an `Origin`, when the request has one, must name such a host too: a page of another site
//!   (and `Origin: null`) is refused (403);
//! - a `POST` must say `Content-Type: application/json`: the bodies a page can send cross-origin
//!   without asking first (`text/plain`, forms) are refused (415).
//!
//! Ports are not compared: a page's port does not make its host the user's.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::sync::watch;

/// A server started by [`serve_guarded`]: the address it listens on, and its task.
pub(crate) type Serving = (SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>);

/// Listens on `addr` and serves `app` with its control routes (`/_agentsim/*`) behind a
/// [`Guard`] (the provider routes take what the providers' SDKs send, as the providers do),
/// until `stopped` turns true: mock-llm's and record's servers.
pub(crate) async fn serve_guarded(
    app: Router,
    addr: SocketAddr,
    allow_hosts: &[String],
    mut stopped: watch::Receiver<bool>,
) -> std::io::Result<Serving> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    let bound = listener.local_addr()?;
    let guard = Arc::new(Guard::new(bound, allow_hosts));
    let app = app.layer(axum::middleware::from_fn_with_state(guard, control_guard));
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
    });
    Ok((bound, task))
}

/// The control routes (`/_agentsim/*`) let in only what the [`Guard`] allows.
async fn control_guard(
    State(guard): State<Arc<Guard>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if !request.uri().path().starts_with("/_agentsim/") {
        return next.run(request).await;
    }
    match guard.check(request.method(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err((status, message)) => {
            let body = serde_json::json!({"error": {"type": "refused", "message": message}});
            let mut response = (status, body.to_string()).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
    }
}

/// The hosts a server answers to.
#[derive(Clone, Debug)]
pub(crate) struct Guard {
    bound: IpAddr,
    /// The allow-list, lowercased (`*`: any host).
    allowed: Vec<String>,
}

impl Guard {
    /// The guard of a server bound to `bound` that also answers to the names in `allow`.
    pub fn new(bound: SocketAddr, allow: &[String]) -> Guard {
        Guard {
            bound: bound.ip(),
            allowed: allow
                .iter()
                .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                .collect(),
        }
    }

    /// Whether `host` (a name or an address, without a port) is one this server answers to.
    pub(crate) fn allows_host(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            if ip.is_loopback() || ip == self.bound || self.bound.is_unspecified() {
                return true;
            }
        } else if host == "localhost" {
            return true;
        }
        self.allowed.iter().any(|a| {
            a == "*" || *a == host || a.trim_start_matches('[').trim_end_matches(']') == bare
        })
    }

    /// `Err` with the status and the reason when a request of `method` with `headers` is not let
    /// in.
    pub fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), (StatusCode, String)> {
        self.check_body_of(method, headers, true)
    }

    /// [`Guard::check`] for a route that takes any body from a server (`agentsim serve`'s
    /// webhook, as the seed's does): a request without `Origin` (no browser sends a POST without
    /// one) may have any content type; one with `Origin` is checked as by [`Guard::check`], so
    /// that no page, not even one of the user's own machine, posts to it without a preflight.
    pub(crate) fn check_any_body(
        &self,
        method: &Method,
        headers: &HeaderMap,
    ) -> Result<(), (StatusCode, String)> {
        let browser = headers.contains_key(header::ORIGIN);
        self.check_body_of(method, headers, browser)
    }

    fn check_body_of(
        &self,
        method: &Method,
        headers: &HeaderMap,
        json_only: bool,
    ) -> Result<(), (StatusCode, String)> {
        let refuse = |status, message: String| Err((status, message));
        let Some(host) = headers.get(header::HOST) else {
            return refuse(
                StatusCode::BAD_REQUEST,
                "the request has no Host header".to_owned(),
            );
        };
        let host = String::from_utf8_lossy(host.as_bytes());
        if !self.allows_host(host_of(&host)) {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("Host {host:?} is not this server's (a loopback name, its address, or one allowed with --allow-host)"),
            );
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = String::from_utf8_lossy(origin.as_bytes());
            let allowed = origin
                .split_once("://")
                .is_some_and(|(_, rest)| self.allows_host(host_of(rest)));
            if !allowed {
                return refuse(
                    StatusCode::FORBIDDEN,
                    format!("cross-origin requests from {origin:?} are refused (allow its host with --allow-host)"),
                );
            }
        }
        if method == Method::POST && json_only {
            let json = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| {
                    v.split(';')
                        .next()
                        .unwrap_or_default()
                        .trim()
                        .eq_ignore_ascii_case("application/json")
                });
            if !json {
                let given = headers
                    .get(header::CONTENT_TYPE)
                    .map_or("none".into(), |v| String::from_utf8_lossy(v.as_bytes()));
                return refuse(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    format!("a POST must be Content-Type: application/json (this one: {given})"),
                );
            }
        }
        Ok(())
    }
}

/// The host of `authority` (`host`, `host:port`, `[v6]:port`, with a path after it or not).
fn host_of(authority: &str) -> &str {
    let authority = authority.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => authority,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn hosts_of_loopback_the_address_and_the_allow_list_only() {
        let guard = Guard::new("127.0.0.1:8080".parse().unwrap(), &["Box.Example".into()]);
        for ok in [
            "localhost",
            "127.0.0.1",
            "127.0.0.2",
            "[::1]",
            "box.example",
            "LOCALHOST.",
        ] {
            assert!(guard.allows_host(ok), "{ok}");
        }
        for no in [
            "evil.example",
            "10.0.0.1",
            "localhost.evil.example",
            "[::2]",
        ] {
            assert!(!guard.allows_host(no), "{no}");
        }
        let all = Guard::new("0.0.0.0:80".parse().unwrap(), &[]);
        assert!(all.allows_host("192.168.1.5") && !all.allows_host("rebound.example"));
        assert_eq!(host_of("[::1]:80"), "[::1]");
        assert_eq!(host_of("a.b:8080/x"), "a.b");
        assert_eq!(host_of("a.b"), "a.b");
    }

    #[test]
    fn origins_and_content_types() {
        let guard = Guard::new("127.0.0.1:8080".parse().unwrap(), &[]);
        let get = Method::GET;
        let post = Method::POST;
        let h = |o: &str| headers(&[("host", "127.0.0.1:8080"), ("origin", o)]);
        assert!(guard.check(&get, &h("http://localhost:3000")).is_ok());
        assert_eq!(
            guard.check(&get, &h("https://evil.example")).unwrap_err().0,
            403
        );
        assert_eq!(guard.check(&get, &h("null")).unwrap_err().0, 403);
        assert_eq!(guard.check(&get, &headers(&[])).unwrap_err().0, 400);
        let typed = |t: &str| headers(&[("host", "localhost"), ("content-type", t)]);
        assert!(guard
            .check(&post, &typed("application/json; charset=utf-8"))
            .is_ok());
        assert_eq!(guard.check(&post, &typed("text/plain")).unwrap_err().0, 415);
        assert_eq!(
            guard
                .check(&post, &headers(&[("host", "localhost")]))
                .unwrap_err()
                .0,
            415
        );
    }
}
