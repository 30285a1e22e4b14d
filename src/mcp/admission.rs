//! Admission of new sessions and new GET streams before they use the database. A burst of them
//! (every client of a restarted replica reconnecting at once) would otherwise take every pool
//! connection and time out there, in turn starving the streams and calls already open. At most
//! half the pool's connections do such opening work at once; the rest wait their turn here, in
//! order, for up to [`WAIT`], and beyond it are refused as busy (an overload, not an outage).

use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

use crate::jsonrpc::RpcError;

/// How long an opening request waits for its turn before it is refused as busy: well within the
/// minute clients and proxies wait for an answer.
const WAIT: Duration = Duration::from_secs(10);

pub struct Admission {
    turns: Semaphore,
    wait: Duration,
}

impl Admission {
    /// Turns for half of `pool_connections` (at least one).
    pub fn new(pool_connections: u32) -> Self {
        let turns = usize::try_from(pool_connections / 2).unwrap_or(1).max(1);
        Self {
            turns: Semaphore::new(turns),
            wait: WAIT,
        }
    }

    /// Waits for a turn, which lasts until the permit is dropped; [`RpcError::busy`] after
    /// [`WAIT`].
    pub async fn turn(&self) -> Result<SemaphorePermit<'_>, RpcError> {
        match tokio::time::timeout(self.wait, self.turns.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            // The semaphore is never closed; a closed one admits nobody either.
            Ok(Err(_)) | Err(_) => {
                tracing::info!(wait = ?self.wait, "refused an opening request: every turn was taken");
                Err(RpcError::busy())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_waits_its_turn_then_is_refused_as_busy() {
        let admission = Admission {
            wait: Duration::from_millis(50),
            ..Admission::new(3)
        };
        let first = admission.turn().await.expect("one turn for a pool of three");
        let (second, ()) = tokio::join!(admission.turn(), async { drop(first) });
        let second = second.expect("the turn freed while waiting");
        let refused = admission.turn().await.expect_err("no turn within the wait");
        assert!(refused.is_busy());
        drop(second);
        assert!(admission.turn().await.is_ok());
    }
}
