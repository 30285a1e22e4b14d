//! Requests gatehouse makes to third parties: the ordinary client (configured providers, the
//! identity provider, HTTP tools), [`Guarded`] for every URL a remote server or a user supplies
//! (an `auth = "mcp"` upstream's endpoints; later webhooks, push channels and enterprise
//! sign-in: reach for `Guarded`), and reading an answer's body within a size bound.

mod guarded;
pub mod reach;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
pub use guarded::{Guarded, system_resolver};
use reqwest::dns::Resolve;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The environment variables naming proxies: the ordinary client follows them, [`Guarded`] never.
pub const ENVIRONMENT_PROXIES: [&str; 6] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// The client for calls to third parties the operator configured: no redirects (a redirect could
/// carry a user's credentials elsewhere), bounded connection time.
pub fn client() -> Result<reqwest::Client, reqwest::Error> {
    builder().build()
}

/// [`client`], resolving names with `resolver` (tests supply their own).
pub fn client_resolving(resolver: Arc<dyn Resolve>) -> Result<reqwest::Client, reqwest::Error> {
    builder().dns_resolver2(resolver).build()
}

fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(concat!("gatehouse/", env!("CARGO_PKG_VERSION")))
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("the answer is too large")]
    TooLarge,
    #[error("the answer did not arrive in time")]
    Timeout,
    #[error("the answer could not be read: {0}")]
    Failed(String),
}

/// Reads the body, refusing more than `limit` bytes without buffering them.
pub async fn read_bounded(response: reqwest::Response, limit: usize) -> Result<Vec<u8>, ReadError> {
    if response.content_length().is_some_and(|len| len > limit as u64) {
        return Err(ReadError::TooLarge);
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            if e.is_timeout() {
                ReadError::Timeout
            } else {
                ReadError::Failed(e.to_string())
            }
        })?;
        if body.len() + chunk.len() > limit {
            return Err(ReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
