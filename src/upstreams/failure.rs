//! What an upstream's failure means for the call: a refused token (401, `invalid_token`), missing
//! scopes (403 `insufficient_scope` with `scope`), or a failure the model is told about in a tool
//! result that names the upstream without showing its internals.

use std::error::Error;

use rmcp::service::{ClientInitializeError, ServiceError};
use rmcp::transport::streamable_http_client::{AuthRequiredError, InsufficientScopeError};

/// Why the upstream refused, as its `WWW-Authenticate` says.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    Unauthorized,
    InsufficientScope(Vec<String>),
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

/// Why `initialize` was refused, when the upstream refused the credentials.
pub fn refusal(error: &ClientInitializeError) -> Option<(Refusal, String)> {
    if let ClientInitializeError::TransportError { error, .. } = error {
        return refusal_in(error.error.as_ref());
    }
    refusal_in(error)
}

/// Why a request was refused, when the upstream refused the credentials.
pub fn request_refusal(error: &ServiceError) -> Option<Refusal> {
    if let ServiceError::TransportSend(error) = error {
        return refusal_in(error.error.as_ref()).map(|(refusal, _)| refusal);
    }
    refusal_in(error).map(|(refusal, _)| refusal)
}

/// A sentence for the model about a failure that is not the user's to fix.
pub fn describe(upstream: &str, error: &ServiceError) -> String {
    match error {
        ServiceError::Timeout { .. } => format!("The {upstream} server did not answer in time."),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
            format!("The {upstream} server cannot be reached right now. Try again in a moment.")
        }
        ServiceError::UnexpectedResponse => format!("The {upstream} server gave an answer gatehouse cannot read."),
        _ => format!("The {upstream} server failed to answer the call."),
    }
}
