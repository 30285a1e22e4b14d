//! The MCP protocol over Streamable HTTP: JSON-RPC messages, sessions, method dispatch and the
//! standalone SSE stream. Knows nothing of OAuth or forms.

mod incall;
mod methods;
pub mod sessions;
mod stream;
mod transport;

use axum::Router;
use axum::routing::post;

use crate::state::AppState;

/// Newest first; `initialize` answers with the client's version when it is listed, else the newest.
pub const SUPPORTED_PROTOCOL_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
pub const LATEST_PROTOCOL_VERSION: &str = SUPPORTED_PROTOCOL_VERSIONS[0];
/// Assumed when a request carries no `MCP-Protocol-Version` header, as the spec says.
pub const DEFAULT_PROTOCOL_VERSION: &str = "2025-03-26";
/// The first version without JSON-RPC batches.
const NO_BATCHES_SINCE: &str = "2025-06-18";
/// The first version whose clients expect a priming event on SSE streams.
const PRIMING_SINCE: &str = "2025-11-25";

pub const MCP_PATH: &str = "/mcp";

pub fn router() -> Router<AppState> {
    Router::new().route(
        MCP_PATH,
        post(transport::post).get(transport::get).delete(transport::delete),
    )
}
