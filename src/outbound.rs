//! Requests gatehouse makes to third parties (providers, the identity provider, HTTP tools): the
//! one outbound client, and reading an answer's body within a size bound.

use std::time::Duration;

use futures::StreamExt;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The client for calls to third parties: no redirects (a redirect could carry a user's
/// credentials elsewhere), bounded connection time.
pub fn client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(concat!("gatehouse/", env!("CARGO_PKG_VERSION")))
        .build()
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
