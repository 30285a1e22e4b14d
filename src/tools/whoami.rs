//! `whoami`: the calling principal and the session, so a user (or model) can see who gatehouse
//! thinks is calling. It never shows a secret.

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::{CallContext, InputSchema, Tool, ToolDefinition, ToolResult};

pub struct Whoami {
    definition: ToolDefinition,
}

impl Whoami {
    pub fn new() -> Self {
        Self {
            definition: ToolDefinition {
                name: "whoami".into(),
                title: Some("Who am I".into()),
                description: "Shows who gatehouse believes is calling (the principal) and the MCP session in use."
                    .into(),
                input_schema: InputSchema::from_config(None, "whoami").expect("the empty schema is valid"),
                read_only: true,
                requires: Vec::new(),
            },
        }
    }
}

#[async_trait]
impl Tool for Whoami {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    async fn call(&self, context: &CallContext<'_>, _arguments: &Map<String, Value>) -> ToolResult {
        let session = context.session;
        ToolResult::structured(json!({
            "principal": context.principal.as_str(),
            "session": {
                "protocolVersion": session.protocol_version,
                "client": session.client_info,
                "startedAt": session.created_at.to_rfc3339(),
            },
        }))
    }
}
