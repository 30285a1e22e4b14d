//! What the operator pages show of each upstream: its catalogue's size and age, the sessions (and,
//! for stdio upstreams, processes) open on this replica, and the last error this replica met
//! listing it, opening a session with it or calling it. The errors are kept in memory, one per
//! configured upstream, each cut to [`MAX_FAULT_BYTES`]: bounded by the configuration.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use chrono::{DateTime, Utc};

/// A recorded error is cut (visibly) beyond this.
const MAX_FAULT_BYTES: usize = 512;

/// The last thing that went wrong with an upstream, on this replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub at: DateTime<Utc>,
    pub what: String,
}

/// The last fault of each configured upstream.
pub struct Faults {
    configured: Vec<String>,
    last: Mutex<HashMap<String, Fault>>,
}

impl Faults {
    pub fn new(configured: impl IntoIterator<Item = String>) -> Self {
        Self {
            configured: configured.into_iter().collect(),
            last: Mutex::new(HashMap::new()),
        }
    }

    /// `what` went wrong with `upstream` just now (ignored for an upstream not configured).
    pub fn record(&self, upstream: &str, what: impl std::fmt::Display) {
        if !self.configured.iter().any(|id| id == upstream) {
            return;
        }
        let fault = Fault {
            at: Utc::now(),
            what: crate::text::bounded(&what.to_string(), MAX_FAULT_BYTES),
        };
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(upstream.to_owned(), fault);
    }

    pub fn last(&self, upstream: &str) -> Option<Fault> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(upstream)
            .cloned()
    }
}

/// One upstream as the operator sees it.
#[derive(Debug, Clone)]
pub struct UpstreamStatus {
    pub id: String,
    /// `http` or `stdio`.
    pub transport: &'static str,
    /// Tools offered now.
    pub tools: usize,
    /// When the stored catalogue was listed (by any replica); `None` before the first listing.
    pub listed_at: Option<DateTime<Utc>>,
    /// Sessions open with it on this replica (users' and gatehouse's own).
    pub sessions: usize,
    /// Processes running for it on this replica (stdio upstreams: one per session).
    pub processes: usize,
    pub last_error: Option<Fault>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_configured_upstreams_keep_their_last_fault_cut_to_its_bound() {
        let faults = Faults::new(["github".to_owned()]);
        faults.record("github", "first");
        faults.record("github", "x".repeat(4 * MAX_FAULT_BYTES));
        faults.record("elsewhere", "ignored");
        let last = faults.last("github").expect("recorded");
        assert!(last.what.len() <= MAX_FAULT_BYTES + 4, "{}", last.what.len());
        assert!(last.what.starts_with("xxx"));
        assert_eq!(faults.last("elsewhere"), None);
    }
}
