//! Per-key rate limits in this process's memory (the `[limits]` rates): a `governor` keyed limiter
//! (GCRA: a burst of the whole allowance, then one more every minute / allowance) whose memory
//! stays bounded. Keys whose allowance has refilled are pruned at most every [`PRUNE_INTERVAL`],
//! and a limiter holding [`MAX_KEYS`] keys even after pruning (a flood of distinct keys) starts
//! over empty. A leaf: it imports nothing of gatehouse.

use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota};

/// Keys one limiter holds at most: a key, its 8-byte state and the `DashMap`'s overhead each, about
/// 5 MB of IP addresses, at most about 30 MB of principals (256 bytes at most).
pub const MAX_KEYS: usize = 100_000;
/// How often refilled keys are forgotten.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(10);

/// Too many within the minute: the next one is allowed after `retry_after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    pub retry_after: Duration,
}

impl Limited {
    /// Whole seconds to wait, rounded up and at least 1: what `Retry-After` and messages say.
    pub fn retry_after_seconds(&self) -> u64 {
        let seconds = self.retry_after.as_secs() + u64::from(self.retry_after.subsec_nanos() > 0);
        seconds.max(1)
    }
}

/// At most `per_minute` events per key (0: no limit).
pub struct RateLimit<K: Hash + Eq + Clone> {
    /// None without a limit.
    counted: Option<Counted<K>>,
}

/// A limit's quota and the keys it counts.
struct Counted<K: Hash + Eq + Clone> {
    quota: Quota,
    limiter: RwLock<Arc<DefaultKeyedRateLimiter<K>>>,
    pruned: Mutex<Instant>,
    max_keys: usize,
}

impl<K: Hash + Eq + Clone> RateLimit<K> {
    /// `per_minute` events per key and minute; 0 turns the limit off.
    pub fn per_minute(per_minute: u32) -> Self {
        Self::with_max_keys(per_minute, MAX_KEYS)
    }

    fn with_max_keys(per_minute: u32, max_keys: usize) -> Self {
        let counted = NonZeroU32::new(per_minute).map(|per_minute| {
            let quota = Quota::per_minute(per_minute);
            Counted {
                quota,
                limiter: RwLock::new(Arc::new(DefaultKeyedRateLimiter::dashmap(quota))),
                pruned: Mutex::new(Instant::now()),
                max_keys,
            }
        });
        Self { counted }
    }

    /// Counts one event for `key`, or says when the next one will be allowed (nothing is counted
    /// then).
    pub fn check(&self, key: &K) -> Result<(), Limited> {
        let Some(counted) = &self.counted else {
            return Ok(());
        };
        counted.keep_bounded();
        let limiter = counted.current();
        limiter.check_key(key).map_err(|not_until| Limited {
            retry_after: not_until.wait_time_from(limiter.clock().now()),
        })
    }

    /// Keys held now.
    pub fn keys(&self) -> usize {
        self.counted.as_ref().map_or(0, |counted| counted.current().len())
    }
}

impl<K: Hash + Eq + Clone> Counted<K> {
    /// Forgets refilled keys every `PRUNE_INTERVAL`, and at once when the limiter is full; starts
    /// over when that did not make room.
    fn keep_bounded(&self) {
        let limiter = self.current();
        let full = limiter.len() >= self.max_keys;
        let Ok(mut pruned) = self.pruned.try_lock() else {
            return;
        };
        if !full && pruned.elapsed() < PRUNE_INTERVAL {
            return;
        }
        *pruned = Instant::now();
        limiter.retain_recent();
        limiter.shrink_to_fit();
        if limiter.len() >= self.max_keys {
            tracing::warn!(
                keys = limiter.len(),
                "a rate limit holds the most keys it may even after forgetting refilled ones: it starts over"
            );
            *self.limiter.write().unwrap_or_else(PoisonError::into_inner) =
                Arc::new(DefaultKeyedRateLimiter::dashmap(self.quota));
        }
    }

    fn current(&self) -> Arc<DefaultKeyedRateLimiter<K>> {
        self.limiter.read().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_the_allowance_then_a_retry_time() {
        let limit = RateLimit::per_minute(3);
        for _ in 0..3 {
            assert_eq!(limit.check(&"alice"), Ok(()));
        }
        let limited = limit.check(&"alice").expect_err("the fourth is refused");
        assert!(limited.retry_after <= Duration::from_secs(20), "{limited:?}");
        assert!((1..=20).contains(&limited.retry_after_seconds()));
        assert_eq!(limit.check(&"bob"), Ok(()), "keys are counted apart");
    }

    #[test]
    fn zero_is_no_limit() {
        let limit = RateLimit::per_minute(0);
        for _ in 0..1000 {
            assert_eq!(limit.check(&1u32), Ok(()));
        }
        assert_eq!(limit.keys(), 0);
    }

    #[test]
    fn a_flood_of_distinct_keys_stays_bounded() {
        let limit = RateLimit::with_max_keys(1, 100);
        for key in 0..1000u32 {
            assert_eq!(limit.check(&key), Ok(()));
            assert!(limit.keys() <= 100, "{} keys", limit.keys());
        }
    }

    #[test]
    fn retry_seconds_round_up() {
        let seconds = |millis| {
            Limited {
                retry_after: Duration::from_millis(millis),
            }
            .retry_after_seconds()
        };
        assert_eq!(seconds(0), 1);
        assert_eq!(seconds(1), 1);
        assert_eq!(seconds(1000), 1);
        assert_eq!(seconds(1001), 2);
    }
}
