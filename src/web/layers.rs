//! The layers of the browser-facing routes: `render_pages` renders the page a `PageResponse`
//! carries with the operator's templates, and logs a failure behind it; `security_headers` puts
//! the page headers on every response of the browser-facing routes, errors and redirects
//! included; `limit_requests` answers 429 to a client address beyond
//! `limits.page_requests_per_minute`. The edge's checks (Host, Origin, a reachable database) run
//! as layers too, built in `web::router`.

use std::net::{IpAddr, Ipv6Addr};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::{Failure, PageError};
use super::page::{Deferred, FormTarget};
use super::state::PagesState;
use crate::edge::ClientAddress;

/// Shown when a page cannot be rendered, or something failed behind it.
const GENERIC_ERROR: &str = "<!doctype html><title>Error</title><p>Something went wrong on our side. Nothing was \
changed; try again in a moment.</p>";

/// Renders the page a handler answered with, and logs a failure behind it with the request.
pub async fn render_pages(State(state): State<PagesState>, request: Request, next: Next) -> Response {
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

/// A client address beyond `limits.page_requests_per_minute` gets 429 with `Retry-After`, before
/// anything else happens. IPv6 addresses count by their /64, which one subscriber usually holds
/// whole.
pub async fn limit_requests(
    State(state): State<PagesState>,
    ClientAddress(address): ClientAddress,
    request: Request,
    next: Next,
) -> Response {
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
