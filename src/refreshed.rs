//! A value fetched from a third party when first needed (the identity provider's metadata, its
//! OpenID client with keys, a remote MCP server's authorization server and client), used while
//! fresh, fetched again when stale or when a caller found it wanting, but at most once per retry
//! interval, and kept while the third party cannot be reached: an outage or a flood of bad tokens
//! is not multiplied by our traffic.

use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

struct Kept<T> {
    value: Option<Arc<T>>,
    fetched_at: Option<Instant>,
    attempted_at: Option<Instant>,
}

pub struct Refreshed<T> {
    ttl: Duration,
    retry_interval: Duration,
    kept: RwLock<Kept<T>>,
    /// One fetch at a time; the others wait for its result.
    fetching: tokio::sync::Mutex<()>,
}

impl<T> Refreshed<T> {
    pub fn new(ttl: Duration, retry_interval: Duration) -> Self {
        Self {
            ttl,
            retry_interval,
            kept: RwLock::new(Kept {
                value: None,
                fetched_at: None,
                attempted_at: None,
            }),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// The kept value while fresh and not `wanting` (one a caller found out of date, such as keys
    /// that did not verify a signature); else `fetch`ed anew, unless another caller did since or
    /// a fetch was tried within the retry interval. A failed fetch leaves the kept value in use;
    /// without one, the failure (or `too_soon` when no fetch may be tried yet) is the answer.
    pub async fn get<E, F, Fut>(
        &self,
        wanting: Option<&Arc<T>>,
        fetch: F,
        too_soon: impl FnOnce() -> E,
    ) -> Result<Arc<T>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        if let Some(value) = self.usable(wanting) {
            return Ok(value);
        }
        let _one_at_a_time = self.fetching.lock().await;
        if let Some(value) = self.usable(wanting) {
            return Ok(value);
        }
        let (kept, may_try) = {
            let kept = self.kept.read().unwrap_or_else(PoisonError::into_inner);
            let may_try = kept.attempted_at.is_none_or(|at| at.elapsed() >= self.retry_interval);
            (kept.value.clone(), may_try)
        };
        if !may_try {
            return kept.ok_or_else(too_soon);
        }
        let result = fetch().await;
        let mut state = self.kept.write().unwrap_or_else(PoisonError::into_inner);
        state.attempted_at = Some(Instant::now());
        match result {
            Ok(value) => {
                let value = Arc::new(value);
                state.value = Some(value.clone());
                state.fetched_at = Some(Instant::now());
                Ok(value)
            }
            Err(error) => kept.ok_or(error),
        }
    }

    /// The third party said `wanting` is no longer good (a client it no longer knows): when it is
    /// the kept value, the next `get` fetches anew at once, whatever the retry interval. Kept
    /// values are dropped only on the third party's own word, so this cannot be used to flood it.
    pub fn expire(&self, wanting: &Arc<T>) {
        let mut kept = self.kept.write().unwrap_or_else(PoisonError::into_inner);
        if kept.value.as_ref().is_some_and(|value| Arc::ptr_eq(value, wanting)) {
            kept.value = None;
            kept.fetched_at = None;
            kept.attempted_at = None;
        }
    }

    fn usable(&self, wanting: Option<&Arc<T>>) -> Option<Arc<T>> {
        let kept = self.kept.read().unwrap_or_else(PoisonError::into_inner);
        let value = kept.value.clone()?;
        match wanting {
            Some(wanting) => (!Arc::ptr_eq(wanting, &value)).then_some(value),
            None => kept
                .fetched_at
                .is_some_and(|at| at.elapsed() < self.ttl)
                .then_some(value),
        }
    }
}
