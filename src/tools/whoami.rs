//! `whoami`: the calling principal, the session, the connected accounts, and the upstream servers
//! with what each still needs, so a user (or model) can see who gatehouse believes is calling and
//! what it can use. It never shows a token.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Arguments, CallContext, InputSchema, Tool, ToolDefinition, ToolOutcome, ToolResult};
use crate::gate::Credentials;

pub struct Whoami {
    definition: ToolDefinition,
}

impl Whoami {
    pub fn new() -> Self {
        Self {
            definition: ToolDefinition::builtin(
                "whoami",
                Some("Who am I"),
                "Shows who gatehouse believes is calling (the principal), the MCP session in use, and the accounts \
                 connected at other services (with their scopes, never their tokens), and the upstream MCP servers \
                 with what each still needs before its tools can be used.",
                InputSchema::from_config(None, "whoami").expect("the empty schema is valid"),
                true,
            ),
        }
    }
}

#[async_trait]
impl Tool for Whoami {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    async fn call(&self, context: &CallContext<'_>, _credentials: &Credentials, _arguments: &Arguments) -> ToolOutcome {
        let session = context.session;
        let connections = match context.gate.connections().summaries(context.principal).await {
            Ok(connections) => connections,
            Err(error) => {
                tracing::error!(%error, "listing connections failed");
                return ToolOutcome::Done(ToolResult::error("Could not list your connections; try again later."));
            }
        };
        let connections: Vec<Value> = connections
            .iter()
            .map(|c| {
                json!({
                    "provider": c.provider,
                    "name": c.provider_name,
                    "account": c.account_label,
                    "scopes": c.scopes,
                    "status": if c.active { "active" } else { "needs sign-in" },
                    "connectedAt": c.connected_at.to_rfc3339(),
                })
            })
            .collect();
        let mut upstreams = Vec::new();
        for offering in context.offerings.offerings() {
            let needs = match context.gate.unmet(context.principal, &offering.requires).await {
                Ok(needs) => needs,
                Err(error) => {
                    tracing::error!(%error, "checking what an upstream needs failed");
                    return ToolOutcome::Done(ToolResult::error(
                        "Could not check the upstream servers; try again later.",
                    ));
                }
            };
            upstreams.push(json!({
                "upstream": offering.id,
                "tools": offering.tools,
                "ready": needs.is_empty(),
                "needs": needs,
            }));
        }
        ToolOutcome::Done(ToolResult::structured(json!({
            "principal": context.principal.as_str(),
            "session": {
                "protocolVersion": session.protocol_version,
                "client": session.client_info,
                "startedAt": session.created_at.to_rfc3339(),
            },
            "connections": connections,
            "upstreams": upstreams,
        })))
    }
}
