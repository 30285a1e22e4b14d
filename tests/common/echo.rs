//! An upstream MCP server's handler for tests and the benchmark: rmcp's, with one tool,
//! `echo(text)`, that returns the text it is given, and one resource, `echo://note`. Included by path where an rmcp server runs
//! (tests/traces.rs, benches/load/fast_upstream.rs), not by every test through `common`.

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    ListResourcesResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
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

/// The one resource's URI.
pub const NOTE: &str = "echo://note";

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().build())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let note = Resource::new(NOTE, "note");
        Ok(ListResourcesResult::with_all_items(vec![note]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri != NOTE {
            return Err(ErrorData::resource_not_found(
                format!("no resource {}", request.uri),
                None,
            ));
        }
        let contents = ResourceContents::text("a note", NOTE);
        Ok(ReadResourceResponse::Complete(ReadResourceResult::new(vec![contents])))
    }
}
