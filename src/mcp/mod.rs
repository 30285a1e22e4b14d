//! The MCP protocol over Streamable HTTP: the transport (headers, bodies, batches; its checks in
//! `checks`, its refusals in `refusal`), sessions, method dispatch, the standalone SSE stream and
//! in-call elicitation; and over stdin/stdout for local clients (`stdio`, with the same dispatch).
//! The endpoint's own parts (sessions, running calls, fixtures) are its router state, `McpState`.
//! A tool call asks the gate whether it may run and turns the answer into MCP: the tool's result,
//! error -32042, a result with the links (both worded in `links`), or `elicitation/create` within
//! the call. What a requirement is (a sign-in, a form) is the gate's business. `offered` serves
//! the upstreams' resources, prompts and completions, gated the same way. With the
//! `conformance` feature, `resources`, `prompts` and `completion` answer those methods for the
//! conformance suite's `fixtures`. `measure` records every answered request in the metrics.
//! `admission` has new sessions and streams take turns before they use the database.

mod admission;
mod calls;
mod checks;
#[cfg(feature = "conformance")]
mod completion;
#[cfg(feature = "conformance")]
pub mod fixtures;
mod incall;
mod links;
mod measure;
mod methods;
mod modern;
mod offered;
mod paging;
#[cfg(feature = "conformance")]
mod prompts;
mod refusal;
mod resource_metadata;
#[cfg(feature = "conformance")]
mod resources;
pub mod sessions;
mod sse;
mod state;
pub mod stdio;
mod stream;
mod tool_call;
mod transport;

use axum::Router;
use axum::routing::post;

#[cfg(not(feature = "conformance"))]
use crate::config::Config;
use crate::domain::ProtocolVersion;
use crate::jsonrpc::RpcError;
use crate::routes;
use crate::state::AppState;
#[cfg(not(feature = "conformance"))]
use crate::state::ExtraTools;
use crate::store::StoreError;

pub use state::McpState;

/// Newest first; `initialize` answers with the client's version when it is listed, else the newest.
pub const SUPPORTED_PROTOCOL_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
pub const LATEST_PROTOCOL_VERSION: &str = SUPPORTED_PROTOCOL_VERSIONS[0];
/// The stateless revision (`modern`), spoken beside the handshake era's versions above.
pub const STATELESS_PROTOCOL_VERSION: &str = ProtocolVersion::STATELESS;
/// Assumed when a request carries no `MCP-Protocol-Version` header, as the spec says.
pub const DEFAULT_PROTOCOL_VERSION: &str = "2025-03-26";
/// The first version without JSON-RPC batches.
const NO_BATCHES_SINCE: &str = "2025-06-18";
/// The first version whose clients expect a priming event on SSE streams.
const PRIMING_SINCE: &str = "2025-11-25";
/// The first version with URL-mode elicitation, -32042 and `notifications/elicitation/complete`:
/// a session on an older one gets none of them, whatever it declares.
const URL_MODE_SINCE: &str = "2025-11-25";

pub fn router() -> Router<McpState> {
    Router::new()
        .route(
            routes::MCP,
            post(transport::post).get(transport::get).delete(transport::delete),
        )
        .merge(resource_metadata::router())
}

#[cfg(feature = "conformance")]
pub use fixtures::tools as extra_tools;

/// The tools the endpoint adds to the configured ones: none without the `conformance` feature.
#[cfg(not(feature = "conformance"))]
pub fn extra_tools(_: &Config) -> ExtraTools {
    ExtraTools::default()
}

/// What the client sees of a store failure, which is logged with `context`: while every database
/// connection is busy "busy", during a database outage "unavailable" (both HTTP 503 with
/// `Retry-After`), otherwise an internal error.
fn store_failure(state: &AppState, context: &str, error: &StoreError) -> RpcError {
    if state.bus.is_overloaded(error) {
        tracing::info!(%error, "{context}: every database connection is busy");
        RpcError::busy()
    } else if error.is_unavailable() {
        tracing::warn!(%error, "{context}: the database is unavailable");
        RpcError::unavailable()
    } else {
        tracing::error!(%error, "{context}");
        RpcError::internal()
    }
}
