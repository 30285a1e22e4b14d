//! `disconnect`: removes the caller's connection at a provider and revokes its tokens there when
//! the provider has a revocation endpoint.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Arguments, CallContext, InputSchema, Tool, ToolDefinition, ToolOutcome, ToolResult};
use crate::gate::{Credentials, Disconnected};

pub struct Disconnect {
    definition: ToolDefinition,
}

impl Disconnect {
    pub fn new() -> Self {
        let schema = json!({
            "type": "object",
            "properties": {"provider": {"type": "string", "description": "The provider id, as whoami lists it"}},
            "required": ["provider"],
            "additionalProperties": false,
        });
        Self {
            definition: ToolDefinition::builtin(
                "disconnect",
                Some("Disconnect an account"),
                "Removes the connection to one of the user's accounts at another service and revokes gatehouse's \
                 access there when the service allows it. Tools needing it will ask the user to sign in again.",
                InputSchema::from_config(Some(&schema), "disconnect").expect("the schema is valid"),
                false,
            ),
        }
    }
}

#[async_trait]
impl Tool for Disconnect {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    async fn call(&self, context: &CallContext<'_>, _credentials: &Credentials, arguments: &Arguments) -> ToolOutcome {
        let provider = arguments.get("provider").and_then(Value::as_str).unwrap_or_default();
        let disconnected = context
            .gate
            .connections()
            .disconnect(context.principal, provider, context.from)
            .await;
        if matches!(
            disconnected,
            Ok(Disconnected::Revoked | Disconnected::NoRevocation | Disconnected::RevocationFailed)
        ) {
            context.offerings.end_sessions_of(context.principal);
        }
        let result = match disconnected {
            Ok(Disconnected::NothingConnected) => ToolResult::error(format!(
                "There is no connection to `{provider}`; whoami lists the connections."
            )),
            Ok(Disconnected::NoRevocation) => ToolResult::text(format!(
                "Disconnected from {provider}. The provider offers no revocation endpoint: the user can also remove \
                 gatehouse's access in their account settings there."
            )),
            Ok(Disconnected::Revoked) => {
                ToolResult::text(format!("Disconnected from {provider}, and access was revoked there."))
            }
            Ok(Disconnected::RevocationFailed) => ToolResult::text(format!(
                "Disconnected from {provider}. Revoking access there failed: the user can remove it in their account \
                 settings at the provider."
            )),
            Err(error) => {
                tracing::error!(%error, "disconnect failed");
                ToolResult::error("Could not disconnect; try again later.")
            }
        };
        ToolOutcome::Done(result)
    }
}
