//! Rate limits in this process's memory: the `[limits]` rates per key, and a plain one (an
//! upstream's stderr lines). Both are GCRA (the generic cell rate algorithm): each key keeps one
//! instant, its theoretical arrival time; an event is allowed while that lies at most the burst
//! ahead of now, and pushes it on by one interval. Keyed memory stays bounded: keys whose
//! allowance has refilled are forgotten at most every [`PRUNE_INTERVAL`], and a limit holding
//! [`MAX_KEYS`] keys even after that (a flood of distinct keys) starts over empty. Written here
//! rather than taken from `governor`: these forty lines are all of it gatehouse uses, and governor
//! brought a concurrent map, a clock abstraction and their dependencies to every build. A leaf: it
//! imports nothing of gatehouse.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Keys one limit holds at most: a key, its instant and the map's overhead each, about 5 MB of IP
/// addresses, at most about 30 MB of principals (256 bytes at most).
pub const MAX_KEYS: usize = 100_000;
/// How often refilled keys are forgotten.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(10);

/// Too many within the period: the next one is allowed after `retry_after`.
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

/// One GCRA rate: an event every `interval` on average, `burst` of them at once after a quiet
/// spell.
#[derive(Debug, Clone, Copy)]
struct Rate {
    interval: Duration,
    /// How far ahead of now the arrival time may be and still allow an event: `burst - 1`
    /// intervals.
    tolerance: Duration,
}

impl Rate {
    fn new(period: Duration, events: u32, burst: u32) -> Self {
        let interval = period / events.max(1);
        Self {
            interval,
            tolerance: interval * burst.max(1).saturating_sub(1),
        }
    }

    /// Allows an event at `now` and moves `arrival` on, or says how long until one is allowed.
    fn admit(&self, arrival: &mut Instant, now: Instant) -> Result<(), Limited> {
        let at = (*arrival).max(now);
        let ahead = at - now;
        if ahead > self.tolerance {
            return Err(Limited {
                retry_after: ahead - self.tolerance,
            });
        }
        *arrival = at + self.interval;
        Ok(())
    }
}

/// At most `per_minute` events per key (0: no limit), all of them at once after a quiet minute.
pub struct RateLimit<K: Hash + Eq + Clone> {
    /// None without a limit.
    counted: Option<Counted<K>>,
}

/// A limit's rate and the keys it counts, each with its arrival time.
struct Counted<K> {
    rate: Rate,
    keys: Mutex<Keys<K>>,
    max_keys: usize,
}

struct Keys<K> {
    arrivals: HashMap<K, Instant>,
    pruned: Instant,
}

impl<K: Hash + Eq + Clone> RateLimit<K> {
    /// `per_minute` events per key and minute; 0 turns the limit off.
    pub fn per_minute(per_minute: u32) -> Self {
        Self::with_max_keys(per_minute, MAX_KEYS)
    }

    fn with_max_keys(per_minute: u32, max_keys: usize) -> Self {
        let counted = (per_minute > 0).then(|| Counted {
            rate: Rate::new(Duration::from_secs(60), per_minute, per_minute),
            keys: Mutex::new(Keys {
                arrivals: HashMap::new(),
                pruned: Instant::now(),
            }),
            max_keys,
        });
        Self { counted }
    }

    /// Counts one event for `key`, or says when the next one will be allowed (nothing is counted
    /// then).
    pub fn check(&self, key: &K) -> Result<(), Limited> {
        let Some(counted) = &self.counted else {
            return Ok(());
        };
        let now = Instant::now();
        let mut keys = counted.keys.lock().unwrap_or_else(PoisonError::into_inner);
        keys.keep_bounded(now, counted.max_keys);
        match keys.arrivals.get_mut(key) {
            Some(arrival) => counted.rate.admit(arrival, now),
            None => {
                let mut arrival = now;
                counted.rate.admit(&mut arrival, now)?;
                keys.arrivals.insert(key.clone(), arrival);
                Ok(())
            }
        }
    }

    /// Keys held now.
    pub fn keys(&self) -> usize {
        self.counted.as_ref().map_or(0, |counted| {
            counted
                .keys
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .arrivals
                .len()
        })
    }
}

impl<K: Hash + Eq> Keys<K> {
    /// Forgets refilled keys every `PRUNE_INTERVAL`, and at once when full; starts over when that
    /// did not make room.
    fn keep_bounded(&mut self, now: Instant, max_keys: usize) {
        let full = self.arrivals.len() >= max_keys;
        if !full && now.duration_since(self.pruned) < PRUNE_INTERVAL {
            return;
        }
        self.pruned = now;
        self.arrivals.retain(|_, arrival| *arrival > now);
        self.arrivals.shrink_to_fit();
        if self.arrivals.len() >= max_keys {
            tracing::warn!(
                keys = self.arrivals.len(),
                "a rate limit holds the most keys it may even after forgetting refilled ones: it starts over"
            );
            self.arrivals = HashMap::new();
        }
    }
}

/// One rate for everything it counts: `per_second` events a second after a burst of `burst`.
pub struct Throttle {
    rate: Rate,
    arrival: Instant,
}

impl Throttle {
    pub fn per_second(per_second: u32, burst: u32) -> Self {
        Self {
            rate: Rate::new(Duration::from_secs(1), per_second, burst),
            arrival: Instant::now(),
        }
    }

    /// Counts one event, or says when the next one will be allowed (nothing is counted then).
    pub fn check(&mut self) -> Result<(), Limited> {
        self.rate.admit(&mut self.arrival, Instant::now())
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
    fn a_throttle_allows_its_burst_then_its_rate() {
        let mut throttle = Throttle::per_second(20, 5);
        for _ in 0..5 {
            assert_eq!(throttle.check(), Ok(()));
        }
        let limited = throttle.check().expect_err("the sixth at once is refused");
        assert!(limited.retry_after <= Duration::from_millis(50), "{limited:?}");
    }

    #[test]
    fn gcra_refills_one_interval_at_a_time() {
        let rate = Rate::new(Duration::from_secs(60), 2, 2);
        let start = Instant::now();
        let mut arrival = start;
        assert_eq!(rate.admit(&mut arrival, start), Ok(()));
        assert_eq!(rate.admit(&mut arrival, start), Ok(()));
        let limited = rate.admit(&mut arrival, start).expect_err("a third at once");
        assert_eq!(limited.retry_after, Duration::from_secs(30));
        let later = start + Duration::from_secs(30);
        assert_eq!(
            rate.admit(&mut arrival, later),
            Ok(()),
            "one refilled after an interval"
        );
        assert!(rate.admit(&mut arrival, later).is_err());
        let idle = start + Duration::from_secs(600);
        assert_eq!(rate.admit(&mut arrival, idle), Ok(()));
        assert_eq!(
            rate.admit(&mut arrival, idle),
            Ok(()),
            "a whole burst after a quiet spell"
        );
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
