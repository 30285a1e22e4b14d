//! The MCP endpoint's router state: the shared state, and what only the endpoint holds: its
//! sessions, the calls running on this replica, the turns to open sessions and streams and, with
//! the `conformance` feature, the fixtures.
//! `McpState::start` builds them and starts their background tasks. Every request clones it, so
//! it is one pointer to the parts.

use std::sync::Arc;

use axum::http::request::Parts;
use tokio::task::JoinHandle;

use super::admission::Admission;
use super::calls::{self, RunningCalls};
use super::refusal::Refusal;
use super::sessions::{self, Sessions};
use crate::edge::{Edge, Refused};
use crate::state::AppState;

#[derive(Clone)]
pub struct McpState(Arc<McpParts>);

impl std::ops::Deref for McpState {
    type Target = McpParts;

    fn deref(&self) -> &McpParts {
        &self.0
    }
}

/// The parts of [`McpState`]; the shared state's parts are reached through it.
pub struct McpParts {
    pub app: AppState,
    pub sessions: Arc<Sessions>,
    /// Calls running on this replica that a client may cancel.
    pub calls: Arc<RunningCalls>,
    /// Turns for new sessions and streams to use the database.
    pub admission: Admission,
    /// The conformance suite's resources and prompts, with `[mcp] conformance_fixtures`.
    #[cfg(feature = "conformance")]
    pub fixtures: Option<Arc<super::fixtures::Fixtures>>,
}

impl std::ops::Deref for McpParts {
    type Target = AppState;

    fn deref(&self) -> &AppState {
        &self.app
    }
}

impl McpState {
    /// The endpoint's parts over `app`; their background tasks (the sessions' upkeep, the calls'
    /// cancellations from other replicas) go to `tasks` and stop with the server.
    pub fn start(app: AppState, tasks: &mut Vec<JoinHandle<()>>) -> Self {
        let sessions = Arc::new(Sessions::new(
            app.store.clone(),
            app.session_cache.clone(),
            app.bus.clone(),
            app.config.sessions_per_principal(),
        ));
        tasks.push(tokio::spawn(sessions::maintain(
            sessions.clone(),
            app.bus.clone(),
            app.metrics.clone(),
            app.config.mcp.session_idle_timeout,
            app.shutdown.clone(),
        )));
        let calls = Arc::new(RunningCalls::new(app.config.limits.held_retries_per_principal));
        tasks.push(tokio::spawn(calls::listen(
            calls.clone(),
            app.bus.clone(),
            app.shutdown.clone(),
        )));
        Self(Arc::new(McpParts {
            #[cfg(feature = "conformance")]
            fixtures: super::fixtures::served(&app.config),
            admission: Admission::new(app.config.database.max_connections),
            app,
            sessions,
            calls,
        }))
    }
}

impl Edge for McpState {
    type Refusal = Refusal;

    fn app(&self) -> &AppState {
        &self.app
    }

    fn refuse(&self, refused: Refused, _parts: &Parts) -> Refusal {
        Refusal::at_edge(refused, &self.identity)
    }
}
