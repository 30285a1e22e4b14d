//! Time arithmetic that cannot overflow the calendar, the Unix time JWTs count in, and the periodic
//! runner every sweep uses. A leaf: the gate, retention, the MCP sessions, the 2026-07-28 calls,
//! the token checks and the CLI share it.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

/// Runs `task` every `period`, the first time at once, until shutdown (a late run delays the
/// next ones rather than bunching them).
pub async fn every<F, Run>(period: Duration, shutdown: CancellationToken, mut task: F)
where
    F: FnMut() -> Run,
    Run: Future<Output = ()>,
{
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = interval.tick() => {}
        }
        task().await;
    }
}

/// Seconds since the Unix epoch now (0 on a clock set before it), as `exp`, `iat` and `nbf` count.
pub fn unix_seconds() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `duration` after `now`, or the end of time when that is past it (a provider may say its token
/// never expires in a number of seconds no calendar holds).
pub fn after(now: DateTime<Utc>, duration: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(duration)
        .ok()
        .and_then(|duration| now.checked_add_signed(duration))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `duration` before `now`, or the start of time when that is before it (a retention or idle
/// timeout configured in millennia must not overflow the calendar).
pub fn before(now: DateTime<Utc>, duration: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(duration)
        .ok()
        .and_then(|duration| now.checked_sub_signed(duration))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_past_the_calendar_ends_at_the_end_of_time() {
        let now = Utc::now();
        assert_eq!(after(now, Duration::from_secs(60)), now + chrono::Duration::seconds(60));
        assert_eq!(after(now, Duration::from_secs(u64::MAX)), DateTime::<Utc>::MAX_UTC);
        assert_eq!(
            after(now, Duration::from_secs(10_000_000_000_000)),
            DateTime::<Utc>::MAX_UTC
        );
    }

    #[test]
    fn a_duration_before_the_calendar_starts_at_the_start_of_time() {
        let now = Utc::now();
        assert_eq!(
            before(now, Duration::from_secs(60)),
            now - chrono::Duration::seconds(60)
        );
        assert_eq!(before(now, Duration::from_secs(u64::MAX)), DateTime::<Utc>::MIN_UTC);
        assert_eq!(
            before(now, Duration::from_secs(10_000_000_000_000)),
            DateTime::<Utc>::MIN_UTC
        );
    }
}
