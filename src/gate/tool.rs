//! What the gate needs of a tool it runs, and of the protocol it runs it for: the tool runs with
//! the credentials the gate lends it ([`RunTool`]) and says how it ended ([`ToolOutcome`]); a call
//! that may wait within itself asks the client through [`AskWithinCall`]. Defined here, below the
//! tools and the protocol that implement them, so the gate knows neither.

use std::future::Future;

use serde_json::{Map, Value, json};

use super::Credentials;
use crate::store::ElicitationRecord;

/// A `CallToolResult`. Failures the model can act on are results with `is_error`, not errors.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub content: Vec<Value>,
    pub structured: Option<Value>,
    pub is_error: bool,
}

impl ToolResult {
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![json!({"type": "text", "text": text.into()})],
            structured: None,
            is_error: false,
        }
    }

    pub fn error(text: impl Into<String>) -> Self {
        Self {
            is_error: true,
            ..Self::text(text)
        }
    }

    /// Structured output with its JSON text, as the spec asks for older clients.
    pub fn structured(value: Value) -> Self {
        let text = value.to_string();
        Self {
            structured: Some(value),
            ..Self::text(text)
        }
    }

    /// The result as JSON, moved rather than copied: an answer can be large.
    pub fn into_json(self) -> Value {
        let mut result = Map::new();
        result.insert("content".into(), Value::Array(self.content));
        result.insert("isError".into(), Value::Bool(self.is_error));
        if let Some(structured) = self.structured {
            result.insert("structuredContent".into(), structured);
        }
        Value::Object(result)
    }
}

/// How a call ended.
pub enum ToolOutcome {
    Done(ToolResult),
    /// The provider refused the token the call used: the user must sign in again.
    CredentialRejected {
        provider: String,
    },
    /// The provider's token lacks these scopes (an upstream's 403 `insufficient_scope`): the user
    /// must grant them.
    ScopesMissing {
        provider: String,
        scopes: Vec<String>,
    },
    /// The user must sign in to `provider` first, though the call did not require it (the identity
    /// provider wants interaction before it exchanges a token): the call requires it from now on.
    SignInRequired {
        provider: String,
    },
    /// The tool wants the user to open these URLs first (an upstream's own -32042): the
    /// `elicitations` entries of its error data, passed on as they are.
    UrlElicitations(Vec<Value>),
    /// The tool needs the client to answer `requests` (2026-07-28 input requests, by key) and
    /// keeps `state` until the retry brings their answers.
    InputRequired {
        requests: Map<String, Value>,
        state: Value,
    },
}

/// A tool call ready to run but for the credentials, which the gate lends it once every
/// requirement is met.
pub trait RunTool: Sync {
    fn run(&self, credentials: &Credentials) -> impl Future<Output = ToolOutcome> + Send;
}

/// How a call waits for the user within itself (`elicit = "request"` on a stream that takes
/// requests).
pub trait AskWithinCall: Sync {
    /// Asks the client to have the user finish `elicitations`, and waits: `Ok` once all are
    /// completed (the gate decides again), or the result the call ends with.
    fn ask(&self, elicitations: &[ElicitationRecord]) -> impl Future<Output = Result<(), ToolResult>> + Send;
}

/// The asking of a call that never waits within itself (`Waiting::No` or `Waiting::Held`): no
/// value of it exists.
pub enum NeverAsks {}

impl AskWithinCall for NeverAsks {
    async fn ask(&self, _elicitations: &[ElicitationRecord]) -> Result<(), ToolResult> {
        match *self {}
    }
}
