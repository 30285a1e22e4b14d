//! Metrics: what gatehouse counts and times, held in a registry of its own (one per `AppState`, so
//! servers in one process never share counters), and its OpenMetrics text for `/metrics`. With
//! `server.metrics_bind` unset, [`Metrics::off`] records nothing and costs a branch per call.
//!
//! Label values come only from `labels`: fixed words, or provider and upstream ids from
//! configuration. A leaf: it imports nothing of gatehouse.

mod labels;

use std::time::Duration;

use prometheus_client::encoding::text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry, Unit};

pub use labels::{
    ElicitationKind, ElicitationOutcome, ListingOutcome, McpOutcome, OTHER, RefreshOutcome, UpstreamOutcome,
};

use labels::{Configured, KindOutcome, Method, MethodOutcome, Outcome, Provider, ProviderOutcome, UpstreamLabels};

/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// MCP request durations: a millisecond to the longest a call may wait for its user.
const REQUEST_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 300.0,
];
/// From an elicitation's creation to its completion: people take seconds to minutes.
const COMPLETION_BUCKETS: [f64; 13] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];
/// From a completion to its notification written to a stream: milliseconds, unless the client
/// had no stream open at the time.
const DELIVERY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0, 600.0,
];

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn request_histogram() -> Histogram {
    Histogram::new(REQUEST_BUCKETS)
}

/// A registry being filled: each metric is registered as it is made, so a field of [`Families`]
/// is written once with its name and help (in the order `/metrics` lists them).
struct Registering(Registry);

impl Registering {
    fn add<M: Metric + Clone>(&mut self, name: &str, help: &str, metric: M) -> M {
        self.0.register(name, help, metric.clone());
        metric
    }

    /// A metric measured in seconds (`_seconds` after its name).
    fn seconds<M: Metric + Clone>(&mut self, name: &str, help: &str, metric: M) -> M {
        self.0.register_with_unit(name, help, Unit::Seconds, metric.clone());
        metric
    }
}

pub struct Metrics {
    families: Option<Box<Families>>,
}

struct Families {
    registry: Registry,
    providers: Configured,
    upstreams: Configured,
    mcp_requests: Family<MethodOutcome, Counter>,
    mcp_duration: Histograms<Method>,
    elicitations: Family<KindOutcome, Counter>,
    completion: Histogram,
    delivery: Histogram,
    streams_open: Gauge,
    sessions_active: Gauge,
    token_refresh: Family<ProviderOutcome, Counter>,
    connections_broken: Family<Provider, Counter>,
    upstream_requests: Family<UpstreamLabels, Counter>,
    upstream_listings: Family<UpstreamLabels, Counter>,
    bus_reconnects: Counter,
    approval_votes: Family<Outcome, Counter>,
    approval_notifications: Family<Outcome, Counter>,
    pool_open: Gauge,
    pool_idle: Gauge,
    pool_max: Gauge,
}

impl Metrics {
    /// Records nothing: `server.metrics_bind` is not set.
    pub fn off() -> Self {
        Self { families: None }
    }

    /// Records; `providers` and `upstreams` are the configured ids, the only values their labels take.
    pub fn new(providers: impl IntoIterator<Item = String>, upstreams: impl IntoIterator<Item = String>) -> Self {
        let mut r = Registering(Registry::with_prefix("gatehouse"));
        let f = Families {
            providers: Configured::new(providers),
            upstreams: Configured::new(upstreams),
            mcp_requests: r.add(
                "mcp_requests",
                "MCP requests answered, by method and outcome",
                Family::default(),
            ),
            mcp_duration: r.seconds(
                "mcp_request_duration",
                "Time from an MCP request to its answer, by method",
                Family::new_with_constructor(request_histogram),
            ),
            elicitations: r.add(
                "elicitations",
                "Elicitations by kind (connection, form, approval) and outcome (created, completed, declined, expired, failed)",
                Family::default(),
            ),
            completion: r.seconds(
                "elicitation_completion",
                "Time from an elicitation's creation to its completion",
                Histogram::new(COMPLETION_BUCKETS),
            ),
            delivery: r.seconds(
                "notification_delivery",
                "Time from an elicitation's completion to its notification written to a client's stream",
                Histogram::new(DELIVERY_BUCKETS),
            ),
            streams_open: r.add(
                "streams_open",
                "Standalone SSE streams open on this replica",
                Gauge::default(),
            ),
            sessions_active: r.add(
                "sessions_active",
                "Live MCP sessions in the database (counted every 30 s)",
                Gauge::default(),
            ),
            token_refresh: r.add(
                "token_refresh",
                "Access token refreshes by provider and outcome",
                Family::default(),
            ),
            connections_broken: r.add(
                "connections_broken",
                "Connections marked broken (the provider refused a token or a refresh), by provider",
                Family::default(),
            ),
            upstream_requests: r.add(
                "upstream_requests",
                "Tool calls forwarded to upstream MCP servers, by upstream and outcome",
                Family::default(),
            ),
            upstream_listings: r.add(
                "upstream_listings",
                "Listings of upstream MCP servers' tools by this replica, by upstream and outcome",
                Family::default(),
            ),
            bus_reconnects: r.add(
                "bus_reconnects",
                "Times this replica's LISTEN connection was opened again after it was lost",
                Counter::default(),
            ),
            approval_votes: r.add(
                "approval_votes",
                "Approvers' votes on approval requests, by outcome (approve, deny)",
                Family::default(),
            ),
            approval_notifications: r.add(
                "approval_notifications",
                "Approval requests announced to their webhook, by outcome (delivered, failed after every retry)",
                Family::default(),
            ),
            pool_open: r.add(
                "db_pool_connections",
                "Database connections open in this replica's pool",
                Gauge::default(),
            ),
            pool_idle: r.add(
                "db_pool_idle_connections",
                "Database connections idle in this replica's pool",
                Gauge::default(),
            ),
            pool_max: r.add(
                "db_pool_max_connections",
                "The most database connections this replica's pool opens",
                Gauge::default(),
            ),
            registry: r.0,
        };
        Self {
            families: Some(Box::new(f)),
        }
    }

    pub fn is_on(&self) -> bool {
        self.families.is_some()
    }

    /// An MCP request answered after `elapsed`.
    pub fn mcp_request(&self, method: &str, outcome: McpOutcome, elapsed: Duration) {
        if let Some(f) = &self.families {
            let method = labels::method(method);
            f.mcp_requests
                .get_or_create(&MethodOutcome {
                    method,
                    outcome: outcome.as_str(),
                })
                .inc();
            f.mcp_duration
                .get_or_create(&Method { method })
                .observe(elapsed.as_secs_f64());
        }
    }

    /// `count` elicitations of `kind` reached `outcome`.
    pub fn elicitations(&self, kind: ElicitationKind, outcome: ElicitationOutcome, count: u64) {
        if let Some(f) = &self.families {
            f.elicitations
                .get_or_create(&KindOutcome {
                    kind: kind.as_str(),
                    outcome: outcome.as_str(),
                })
                .inc_by(count);
        }
    }

    /// An elicitation completed `elapsed` after it was created.
    pub fn elicitation_completed_after(&self, elapsed: Duration) {
        if let Some(f) = &self.families {
            f.completion.observe(elapsed.as_secs_f64());
        }
    }

    /// A completion notification was written to a stream `elapsed` after the completion.
    pub fn notification_delivered_after(&self, elapsed: Duration) {
        if let Some(f) = &self.families {
            f.delivery.observe(elapsed.as_secs_f64());
        }
    }

    /// A standalone stream opened; it counts as open until the guard is dropped.
    pub fn stream_opened(&self) -> OpenStream {
        let gauge = self.families.as_ref().map(|f| f.streams_open.clone());
        if let Some(gauge) = &gauge {
            gauge.inc();
        }
        OpenStream(gauge)
    }

    pub fn set_sessions_active(&self, count: i64) {
        if let Some(f) = &self.families {
            f.sessions_active.set(count);
        }
    }

    pub fn token_refresh(&self, provider: &str, outcome: RefreshOutcome) {
        if let Some(f) = &self.families {
            f.token_refresh
                .get_or_create(&ProviderOutcome {
                    provider: f.providers.label(provider),
                    outcome: outcome.as_str(),
                })
                .inc();
        }
    }

    pub fn connection_broken(&self, provider: &str) {
        if let Some(f) = &self.families {
            f.connections_broken
                .get_or_create(&Provider {
                    provider: f.providers.label(provider),
                })
                .inc();
        }
    }

    pub fn upstream_request(&self, upstream: &str, outcome: UpstreamOutcome) {
        if let Some(f) = &self.families {
            f.upstream_requests
                .get_or_create(&UpstreamLabels {
                    upstream: f.upstreams.label(upstream),
                    outcome: outcome.as_str(),
                })
                .inc();
        }
    }

    pub fn upstream_listing(&self, upstream: &str, outcome: ListingOutcome) {
        if let Some(f) = &self.families {
            f.upstream_listings
                .get_or_create(&UpstreamLabels {
                    upstream: f.upstreams.label(upstream),
                    outcome: outcome.as_str(),
                })
                .inc();
        }
    }

    /// An approver voted (`approve` or `deny`).
    pub fn approval_vote(&self, outcome: &'static str) {
        if let Some(f) = &self.families {
            f.approval_votes.get_or_create(&Outcome { outcome }).inc();
        }
    }

    /// A request's announcement was delivered, or failed after every retry.
    pub fn approval_notification(&self, delivered: bool) {
        if let Some(f) = &self.families {
            let outcome = if delivered { "delivered" } else { "failed" };
            f.approval_notifications.get_or_create(&Outcome { outcome }).inc();
        }
    }

    pub fn bus_reconnected(&self) {
        if let Some(f) = &self.families {
            f.bus_reconnects.inc();
        }
    }

    /// The database pool as it is now: connections open, idle among them, and the most it opens.
    pub fn set_pool(&self, open: u32, idle: usize, max: u32) {
        if let Some(f) = &self.families {
            f.pool_open.set(i64::from(open));
            f.pool_idle.set(i64::try_from(idle).unwrap_or(i64::MAX));
            f.pool_max.set(i64::from(max));
        }
    }

    /// Everything recorded, as OpenMetrics text ([`CONTENT_TYPE`]); empty when off.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        if let Some(f) = &self.families {
            text::encode(&mut out, &f.registry)?;
        }
        Ok(out)
    }
}

/// A stream counted in `gatehouse_streams_open` while this lives.
pub struct OpenStream(Option<Gauge>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        if let Some(gauge) = &self.0 {
            gauge.dec();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(metrics: &Metrics) -> String {
        metrics.encode().expect("encode")
    }

    #[test]
    fn off_records_nothing() {
        let metrics = Metrics::off();
        metrics.mcp_request("tools/call", McpOutcome::Ok, Duration::from_millis(3));
        let _stream = metrics.stream_opened();
        assert!(!metrics.is_on());
        assert_eq!(text(&metrics), "");
    }

    #[test]
    fn the_issues_names_with_bounded_labels() {
        let metrics = Metrics::new(["github".to_owned()], ["tracker".to_owned()]);
        metrics.mcp_request("tools/call", McpOutcome::ElicitationRequired, Duration::from_millis(3));
        metrics.mcp_request("alice/secret", McpOutcome::ClientError, Duration::from_millis(1));
        metrics.elicitations(ElicitationKind::Connection, ElicitationOutcome::Created, 1);
        metrics.elicitation_completed_after(Duration::from_secs(4));
        metrics.notification_delivered_after(Duration::from_millis(2));
        metrics.token_refresh("github", RefreshOutcome::Refreshed);
        metrics.connection_broken("not-configured");
        metrics.upstream_request("tracker", UpstreamOutcome::Ok);
        metrics.bus_reconnected();
        metrics.set_pool(3, 1, 16);
        let out = text(&metrics);
        for line in [
            r#"gatehouse_mcp_requests_total{method="tools/call",outcome="elicitation_required"} 1"#,
            r#"gatehouse_mcp_requests_total{method="other",outcome="client_error"} 1"#,
            r#"gatehouse_mcp_request_duration_seconds_count{method="tools/call"} 1"#,
            r#"gatehouse_elicitations_total{kind="connection",outcome="created"} 1"#,
            "gatehouse_elicitation_completion_seconds_count 1",
            "gatehouse_notification_delivery_seconds_count 1",
            r#"gatehouse_token_refresh_total{provider="github",outcome="refreshed"} 1"#,
            r#"gatehouse_connections_broken_total{provider="other"} 1"#,
            r#"gatehouse_upstream_requests_total{upstream="tracker",outcome="ok"} 1"#,
            "gatehouse_bus_reconnects_total 1",
            "gatehouse_db_pool_connections 3",
            "gatehouse_db_pool_idle_connections 1",
            "gatehouse_db_pool_max_connections 16",
            "gatehouse_sessions_active 0",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in:\n{out}");
        }
        assert!(!out.contains("alice"), "{out}");
    }

    #[test]
    fn open_streams_count_until_dropped() {
        let metrics = Metrics::new([], []);
        let first = metrics.stream_opened();
        let second = metrics.stream_opened();
        assert!(text(&metrics).lines().any(|l| l == "gatehouse_streams_open 2"));
        drop(first);
        drop(second);
        assert!(text(&metrics).lines().any(|l| l == "gatehouse_streams_open 0"));
    }

    #[test]
    fn registries_are_per_value() {
        let one = Metrics::new([], []);
        let two = Metrics::new([], []);
        one.bus_reconnected();
        assert!(text(&one).contains("gatehouse_bus_reconnects_total 1"));
        assert!(text(&two).contains("gatehouse_bus_reconnects_total 0"));
    }

    #[test]
    fn the_dashboard_uses_only_names_gatehouse_exports() {
        let metrics = Metrics::new(["github".to_owned()], ["tracker".to_owned()]);
        metrics.mcp_request("ping", McpOutcome::Ok, Duration::from_millis(1));
        metrics.elicitations(ElicitationKind::Form, ElicitationOutcome::Completed, 1);
        metrics.token_refresh("github", RefreshOutcome::Refused);
        metrics.connection_broken("github");
        metrics.upstream_request("tracker", UpstreamOutcome::Error);
        let out = text(&metrics);
        let dashboard = include_str!("../../deploy/grafana-dashboard.json");
        let names: std::collections::BTreeSet<&str> = dashboard
            .match_indices("gatehouse_")
            .map(|(at, _)| {
                let rest = &dashboard[at..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
            .collect();
        assert!(names.len() >= 10, "{names:?}");
        for name in names {
            assert!(
                out.lines()
                    .any(|line| line.starts_with(&format!("{name}{{")) || line.starts_with(&format!("{name} "))),
                "{name} is not exported:\n{out}"
            );
        }
    }
}
