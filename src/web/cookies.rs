//! The pages' cookies: reading one from a request, and the `Set-Cookie` values that set and
//! expire one. Every cookie is `HttpOnly; SameSite=Lax` (sent on the top-level GET back from a
//! provider, never on another site's post), `Secure` under https, and has the path prefix of
//! `server.public_url` as its `Path` (`/` without one). Names get their `__Host-`/`__Secure-`
//! prefix from `PublicUrl::cookie_name`.

use std::time::Duration;

use axum::http::header::COOKIE;
use axum::http::{HeaderMap, HeaderValue};

use super::error::PageError;
use super::state::PagesState;

/// The value of cookie `name`, from any Cookie header.
pub fn read<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Sets cookie `name` to `value` for `max_age`.
pub fn set(state: &PagesState, name: &str, value: &str, max_age: Duration) -> Result<HeaderValue, PageError> {
    header_value(&format!(
        "{name}={value}; Path={}; HttpOnly; SameSite=Lax; Max-Age={}{}",
        state.public_url.cookie_path(),
        max_age.as_secs(),
        secure_attribute(state)
    ))
}

/// Makes the browser drop cookie `name`.
pub fn expire(state: &PagesState, name: &str) -> Result<HeaderValue, PageError> {
    header_value(&format!(
        "{name}=; Path={}; HttpOnly; SameSite=Lax; Max-Age=0{}",
        state.public_url.cookie_path(),
        secure_attribute(state)
    ))
}

fn secure_attribute(state: &PagesState) -> &'static str {
    if state.public_url.is_https() { "; Secure" } else { "" }
}

/// A header value built from text gatehouse made; failing is a bug, reported as an internal error.
pub fn header_value(text: &str) -> Result<HeaderValue, PageError> {
    HeaderValue::from_str(text)
        .map_err(|error| PageError::Internal(format!("a header value could not be built: {error}")))
}
