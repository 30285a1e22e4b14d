//! The pages' cookies: reading one from a request, and the `Set-Cookie` values that set and
//! expire one. Every cookie is `Path=/; HttpOnly; SameSite=Lax` (sent on the top-level GET back
//! from a provider, never on another site's post), and `Secure` under https.

use std::time::Duration;

use axum::http::header::COOKIE;
use axum::http::{HeaderMap, HeaderValue};

use super::error::PageError;
use crate::state::AppState;

/// `name` with the `__Host-` prefix under https (the browser then insists on Secure, Path=/ and
/// no Domain, so no sibling host can plant it); plain on http://localhost, where browsers refuse
/// `Secure` cookies.
pub fn host_only(state: &AppState, name: &str) -> String {
    if state.public_url.is_https() {
        format!("__Host-{name}")
    } else {
        name.to_owned()
    }
}

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
pub fn set(state: &AppState, name: &str, value: &str, max_age: Duration) -> Result<HeaderValue, PageError> {
    header_value(&format!(
        "{name}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{}",
        max_age.as_secs(),
        secure_attribute(state)
    ))
}

/// Makes the browser drop cookie `name`.
pub fn expire(state: &AppState, name: &str) -> Result<HeaderValue, PageError> {
    header_value(&format!(
        "{name}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0{}",
        secure_attribute(state)
    ))
}

fn secure_attribute(state: &AppState) -> &'static str {
    if state.public_url.is_https() { "; Secure" } else { "" }
}

/// A header value built from text gatehouse made; failing is a bug, reported as an internal error.
pub fn header_value(text: &str) -> Result<HeaderValue, PageError> {
    HeaderValue::from_str(text)
        .map_err(|error| PageError::Internal(format!("a header value could not be built: {error}")))
}
