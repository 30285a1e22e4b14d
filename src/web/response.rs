//! Pages as responses. A handler returns a `PageResponse` (a page and its status); the
//! `render_pages` layer renders it with the operator's templates, which a plain `IntoResponse`
//! cannot reach. `security_headers` puts the page headers on every response of the
//! browser-facing routes, errors and redirects included; `refuse_foreign_requests` gives the pages
//! the Host and Origin checks `/mcp` has; `refuse_while_database_down` answers 503 at once during an
//! outage; `limit_requests` answers 429 to a client address beyond `limits.page_requests_per_minute`.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, HOST, ORIGIN, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::{Failure, PageError};
use super::extract::peer_of;
use super::templates::{Page, RenderError, Templates};
use crate::state::AppState;

/// A page, type-erased so a response can carry it to the rendering layer.
trait Renderable: Send + Sync {
    fn render(&self, templates: &Templates, prefix: &str) -> Result<String, RenderError>;
}

impl<P: Page + Send + Sync> Renderable for P {
    fn render(&self, templates: &Templates, prefix: &str) -> Result<String, RenderError> {
        templates.render(self, prefix)
    }
}

/// The page a response still has to render (a response extension).
#[derive(Clone)]
struct Deferred(Arc<dyn Renderable>);

/// A page with the status it is sent with.
pub struct PageResponse {
    status: StatusCode,
    page: Arc<dyn Renderable>,
    form_target: Option<FormTarget>,
}

/// Another origin a page's form leads to through a redirect (the connect page's Continue goes on
/// to the provider). Browsers hold such redirects to the page's CSP `form-action`, so it is named
/// there beside `'self'`.
#[derive(Clone)]
struct FormTarget(String);

impl PageResponse {
    pub fn new(page: impl Page + Send + Sync + 'static) -> Self {
        Self {
            status: StatusCode::OK,
            page: Arc::new(page),
            form_target: None,
        }
    }

    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    /// The page's form may lead on to `url`'s origin.
    pub fn with_form_target(mut self, url: &url::Url) -> Self {
        self.form_target = Some(FormTarget(url.origin().ascii_serialization()));
        self
    }
}

impl IntoResponse for PageResponse {
    fn into_response(self) -> Response {
        let mut response = self.status.into_response();
        response.extensions_mut().insert(Deferred(self.page));
        if let Some(target) = self.form_target {
            response.extensions_mut().insert(target);
        }
        response
    }
}

/// Shown when a page cannot be rendered, or something failed behind it.
const GENERIC_ERROR: &str = "<!doctype html><title>Error</title><p>Something went wrong on our side. Nothing was \
changed; try again in a moment.</p>";

/// Renders the page a handler answered with, and logs a failure behind it with the request.
pub async fn render_pages(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let mut response = next.run(request).await;
    if let Some(Failure(cause)) = response.extensions_mut().remove::<Failure>() {
        tracing::error!(%method, path, error = %cause, "a page request failed");
    }
    let Some(Deferred(page)) = response.extensions_mut().remove::<Deferred>() else {
        return response;
    };
    match page.render(&state.templates, state.public_url.prefix()) {
        Ok(html) => {
            *response.body_mut() = Body::from(html);
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
            response
        }
        Err(error) => {
            tracing::error!(%method, path, %error, "a page could not be rendered");
            let mut failed = (StatusCode::INTERNAL_SERVER_ERROR, GENERIC_ERROR).into_response();
            failed
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
            failed
        }
    }
}

/// On a loopback-bound instance, a request whose `Host` is not this server's name is refused, as
/// `/mcp` refuses it: a DNS name rebound to 127.0.0.1 must not let another site's page read ours.
/// A post from another site's page is refused by its `Origin`, by the rule of `/mcp` (our public
/// origin, a configured one, or a loopback alias of the bound port when bound to loopback),
/// before its body is read.
pub async fn refuse_foreign_requests(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if state.bound_to_loopback() {
        let host = request.headers().get(HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
        if !state.host_allowed(host) {
            tracing::info!(
                host,
                path = request.uri().path(),
                "refused a page request for a foreign Host"
            );
            return PageError::ForeignHost.into_response();
        }
    }
    let cross_site = !request.method().is_safe()
        && request
            .headers()
            .get(ORIGIN)
            .is_some_and(|o| !o.to_str().is_ok_and(|o| state.origin_allowed(o)));
    if cross_site {
        tracing::info!(path = request.uri().path(), "refused a page post from another origin");
        return PageError::Forged.into_response();
    }
    next.run(request).await
}

/// While the bus finds the database unreachable, the pages that need it are refused at once
/// (503) instead of each waiting for a database connection.
pub async fn refuse_while_database_down(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if !state.bus.is_database_reachable() {
        return PageError::Unavailable.into_response();
    }
    next.run(request).await
}

/// A client address beyond `limits.page_requests_per_minute` gets 429 with `Retry-After`, before
/// anything else happens. IPv6 addresses count by their /64, which one subscriber usually holds
/// whole.
pub async fn limit_requests(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let peer = match peer_of(request.extensions()) {
        Ok(peer) => peer,
        Err(error) => return error.into_response(),
    };
    let address = state.client_address(request.headers(), peer);
    if let Err(limited) = state.page_requests.check(&counted_as(address)) {
        let retry_after = limited.retry_after_seconds();
        tracing::info!(%address, path = request.uri().path(), retry_after, "refused a page request: too many from this address");
        return PageError::TooManyRequests { retry_after }.into_response();
    }
    next.run(request).await
}

/// The address a page request is counted under: IPv4 as it is, IPv6 by its /64.
fn counted_as(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & !u128::from(u64::MAX))),
        },
        v4 => v4,
    }
}

/// Every page's Content Security Policy: nothing loads but our own styles and images, forms post
/// only to us (and where `form_action` adds), nobody frames us.
fn csp(form_action: &str) -> String {
    format!(
        "default-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self'; form-action {form_action}; \
         frame-ancestors 'none'; base-uri 'none'"
    )
}

/// The headers every browser-facing response carries.
pub async fn security_headers(mut response: Response) -> Response {
    let form_target = response.extensions_mut().remove::<FormTarget>();
    // An origin serializes to visible ASCII without spaces or semicolons: it cannot add a directive.
    let form_action = form_target.map_or_else(|| "'self'".to_owned(), |FormTarget(origin)| format!("'self' {origin}"));
    let policy = HeaderValue::try_from(csp(&form_action))
        .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'; form-action 'self'; frame-ancestors 'none'"));
    let headers = response.headers_mut();
    headers.insert(CONTENT_SECURITY_POLICY, policy);
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Not `no-referrer`: under it browsers send `Origin: null` with the page's own form posts,
    // which the origin check must refuse. `same-origin` still tells other sites nothing.
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_addresses_count_by_their_64() {
        let ip = |text: &str| text.parse::<IpAddr>().expect("ip");
        assert_eq!(counted_as(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(counted_as(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(counted_as(ip("2001:db8:1:2:bbbb::9")), ip("2001:db8:1:2::"));
        assert_eq!(counted_as(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
    }
}
