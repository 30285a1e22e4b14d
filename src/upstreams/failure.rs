//! What an upstream's failure means for the call: a refused token (401, `invalid_token`), missing
//! scopes (403 `insufficient_scope` with `scope`), a fault only the operator can fix (the command
//! is not found or not executable, no MCP server at the URL, a refused TLS certificate), or one
//! that may pass (connection refused, a timeout, a 5xx). The model is told in a tool result that
//! names the upstream without showing its internals: "try again in a moment" for a fault that may
//! pass, "tell the user the operator must fix it" for one that will not.

use std::error::Error;

use rmcp::service::{ClientInitializeError, ServiceError};
use rmcp::transport::streamable_http_client::{AuthRequiredError, InsufficientScopeError, StreamableHttpError};

/// The error of the HTTP upstreams' transport (rmcp's client over gatehouse's reqwest).
pub type HttpError = StreamableHttpError<reqwest13::Error>;

/// Why the upstream refused, as its `WWW-Authenticate` says.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    Unauthorized,
    InsufficientScope(Vec<String>),
}

/// Why a session with an upstream could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The upstream refused the credentials (401) or the scopes (403) at `initialize`.
    #[error("refused: {challenge}")]
    Refused { challenge: String, status: Refusal },
    #[error("all {0} sessions of this upstream are busy")]
    Full(usize),
    /// A fault that may pass on its own: connection refused, a timeout, a 5xx.
    #[error("{0}")]
    Failed(String),
    /// A fault that stays until the operator fixes it; `why` is for the log.
    #[error("{why}")]
    Broken { fault: Permanent, why: String },
}

/// A fault of an upstream that no retry can mend: its configuration, or the server it names, must
/// change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permanent {
    /// The program is not found (on `PATH`, or at the path given).
    CommandNotFound,
    /// The program's file exists but may not be run.
    NotExecutable,
    /// The URL answers this status (404, 410): no MCP server is there.
    NoEndpoint(u16),
    /// The server's TLS certificate is refused (another name, an unknown issuer, expired).
    Certificate,
    /// The TLS handshake fails for another reason (no common version or cipher, an alert).
    Tls,
}

impl Permanent {
    /// What is wrong, for the model and the user, without internals.
    fn what(self) -> String {
        match self {
            Self::CommandNotFound => "its program is not installed where gatehouse runs".to_owned(),
            Self::NotExecutable => "its program is there but may not be run".to_owned(),
            Self::NoEndpoint(status) => format!("its URL answers HTTP {status}: no MCP server is there"),
            Self::Certificate => "its TLS certificate is refused".to_owned(),
            Self::Tls => "the TLS handshake with it fails".to_owned(),
        }
    }

    /// The fault of a process that could not be started, when it is one that stays.
    pub fn of_spawn(error: &std::io::Error) -> Option<Self> {
        match error.kind() {
            std::io::ErrorKind::NotFound => Some(Self::CommandNotFound),
            std::io::ErrorKind::PermissionDenied => Some(Self::NotExecutable),
            _ => None,
        }
    }
}

/// The sentence for the model about a fault that may pass.
pub fn unreachable(upstream: &str) -> String {
    format!("The {upstream} server cannot be reached right now. Try again in a moment.")
}

/// The sentence for the model about a fault that stays: it is the operator's to fix.
pub fn broken(upstream: &str, fault: Permanent) -> String {
    format!(
        "The {upstream} server cannot be used: {}. This is not temporary, so calling again will not help: \
         tell the user that the gatehouse operator must fix the `{upstream}` upstream.",
        fault.what()
    )
}

/// The refusal carried anywhere in `error`'s chain of sources, with its challenge.
fn refusal_in(error: &(dyn Error + 'static)) -> Option<(Refusal, String)> {
    let mut source = Some(error);
    while let Some(current) = source {
        if let Some(required) = current.downcast_ref::<AuthRequiredError>() {
            return Some((Refusal::Unauthorized, required.www_authenticate_header.clone()));
        }
        if let Some(insufficient) = current.downcast_ref::<InsufficientScopeError>() {
            let challenge = insufficient.www_authenticate_header.clone();
            return Some(match insufficient.get_required_scope() {
                Some(scope) => (
                    Refusal::InsufficientScope(scope.split_whitespace().map(str::to_owned).collect()),
                    challenge,
                ),
                // A 403 that names no scope: more consent cannot help, the token is refused.
                None => (Refusal::Unauthorized, challenge),
            });
        }
        source = current.source();
    }
    None
}

/// The transport's own error within `error` (rmcp names it as no source), else `error`.
fn initialize_source(error: &ClientInitializeError) -> &(dyn Error + 'static) {
    match error {
        ClientInitializeError::TransportError { error, .. } => error.error.as_ref(),
        error => error,
    }
}

/// Why `initialize` was refused, when the upstream refused the credentials.
pub fn refusal(error: &ClientInitializeError) -> Option<(Refusal, String)> {
    refusal_in(initialize_source(error))
}

/// Why a request was refused, when the upstream refused the credentials.
pub fn request_refusal(error: &ServiceError) -> Option<Refusal> {
    if let ServiceError::TransportSend(error) = error {
        return refusal_in(error.error.as_ref()).map(|(refusal, _)| refusal);
    }
    refusal_in(error).map(|(refusal, _)| refusal)
}

/// The fault that stays, when `initialize` failed with one.
pub fn initialize_fault(error: &ClientInitializeError) -> Option<Permanent> {
    permanent_in(initialize_source(error))
}

/// The fault that stays anywhere in `error`'s chain of sources: a missing endpoint in rmcp's
/// error, a rustls error (also where an `io::Error` carries it, which names it as no source).
fn permanent_in(error: &(dyn Error + 'static)) -> Option<Permanent> {
    let mut source = Some(error);
    while let Some(current) = source {
        if let Some(http) = current.downcast_ref::<HttpError>() {
            match http {
                StreamableHttpError::UnexpectedServerResponse(text) => {
                    if let Some(status) = missing_endpoint(text) {
                        return Some(Permanent::NoEndpoint(status));
                    }
                }
                // Its reqwest error is named as no source either.
                StreamableHttpError::Client(client) => return permanent_in(client),
                _ => {}
            }
        }
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return Some(match tls {
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => Permanent::Certificate,
                _ => Permanent::Tls,
            });
        }
        if let Some(inner) = current
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            && let Some(fault) = permanent_in(inner)
        {
            return Some(fault);
        }
        source = current.source();
    }
    None
}

/// The status of rmcp's "HTTP 404 Not Found: ..." (its text for a failed POST without a JSON-RPC
/// body, which keeps the status in no field), when it says no endpoint is there.
/// `tests/upstream_faults.rs` holds this to rmcp's real answer to an upstream's 404.
fn missing_endpoint(text: &str) -> Option<u16> {
    let status: u16 = text.strip_prefix("HTTP ")?.get(..3)?.parse().ok()?;
    matches!(status, 404 | 410).then_some(status)
}

/// A sentence for the model about a failure that is not the user's to fix.
pub fn describe(upstream: &str, error: &ServiceError) -> String {
    match error {
        ServiceError::Timeout { .. } => format!("The {upstream} server did not answer in time."),
        ServiceError::TransportSend(sent) => match permanent_in(sent.error.as_ref()) {
            Some(fault) => broken(upstream, fault),
            None => unreachable(upstream),
        },
        ServiceError::TransportClosed => unreachable(upstream),
        ServiceError::UnexpectedResponse => format!("The {upstream} server gave an answer gatehouse cannot read."),
        _ => format!("The {upstream} server failed to answer the call."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_endpoint_is_read_from_rmcps_text_and_nothing_else_is() {
        assert_eq!(missing_endpoint("HTTP 404 Not Found: "), Some(404));
        assert_eq!(missing_endpoint("HTTP 410 Gone: gone"), Some(410));
        assert_eq!(missing_endpoint("HTTP 400 Bad Request: x"), None);
        assert_eq!(missing_endpoint("expect initialized, accepted"), None);
        assert_eq!(missing_endpoint("HTTP 4"), None);
    }

    #[test]
    fn a_permanent_fault_is_found_inside_an_io_error_and_reqwests_chain() {
        let tls = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName),
        );
        assert_eq!(permanent_in(&tls), Some(Permanent::Certificate));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(permanent_in(&refused), None);
        let http: HttpError = StreamableHttpError::UnexpectedServerResponse("HTTP 404 Not Found: ".into());
        assert_eq!(permanent_in(&http), Some(Permanent::NoEndpoint(404)));
    }

    #[test]
    fn the_sentences_say_whether_to_try_again() {
        assert!(unreachable("docs").contains("Try again in a moment"));
        let said = broken("docs", Permanent::CommandNotFound);
        assert!(
            said.contains("operator must fix") && !said.contains("Try again"),
            "{said}"
        );
    }
}
