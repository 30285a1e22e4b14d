//! An upstream MCP server's handler for tests and the benchmark: rmcp's, with one tool,
//! `echo(text)`, that returns the text it is given. Included by path where an rmcp server runs
//! (tests/traces.rs, benches/load/fast_upstream.rs), not by every test through `common`.

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, schemars, tool, tool_handler, tool_router};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct EchoRequest {
    /// Returned as it came.
    text: String,
}

#[derive(Debug, Clone)]
pub struct Echo {
    tool_router: ToolRouter<Self>,
}

impl Default for Echo {
    fn default() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }
}

#[tool_router]
impl Echo {
    #[tool(description = "Returns the text it is given")]
    fn echo(&self, Parameters(EchoRequest { text }): Parameters<EchoRequest>) -> String {
        text
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}
