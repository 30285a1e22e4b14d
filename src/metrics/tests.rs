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
