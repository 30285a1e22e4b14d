//! Metrics (`server.metrics_bind`): scraped over real HTTP from the metrics listener after a whole
//! elicitation flow against the fake provider, on PostgreSQL and SQLite; never on the public
//! listener; label values never a principal or an id; the key validated.

mod common;

use common::fake_oauth::{AuthorizeOutcome, FakeOptions, FakeProvider};
use common::{
    Backend, Browser, HEADER_IDENTITY, TestDatabase, TestServer, WAIT, elicitations, load_config, refusal, url_of,
};
use reqwest::StatusCode;
use serde_json::json;

/// The user of these tests, named by the reverse proxy: a value no label may carry.
const PRINCIPAL: &str = "metrics-user-5d0c9e";
const USER_HEADER: &str = "X-Forwarded-User";

/// Header identity, metrics on, and Fake Hub with its tools `me` and `me_write`.
fn configuration(fake: &FakeProvider) -> String {
    format!(
        "{HEADER_IDENTITY}metrics_bind = \"127.0.0.1:9464\"\n{}",
        fake.configure(include_str!("fixtures/fake_hub.toml"))
    )
}

/// The value of the series `name` (with its labels, exactly as written), if it is there.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Each of `expected` (a series as in [`value`], a space, its value) is in the text.
fn assert_values(text: &str, expected: &[&str]) {
    for line in expected {
        let (series, number) = line.rsplit_once(' ').expect("a series and its value");
        let number: f64 = number.parse().expect("a number");
        assert_eq!(value(text, series), Some(number), "{series} in:\n{text}");
    }
}

/// Every label value in the text.
fn label_values(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            line.split_once('{')?
                .1
                .split_once('}')
                .map(|(labels, _)| labels.to_owned())
        })
        .flat_map(|labels| {
            labels
                .split(',')
                .filter_map(|pair| pair.split_once('=').map(|(_, v)| v.trim_matches('"').to_owned()))
                .collect::<Vec<_>>()
        })
        .collect()
}

backend_test!(
    /// A gated call elicits a sign-in, the browser signs in at the fake provider, the completion
    /// reaches the client's stream and the retried call runs: the scrape counts each step.
    async fn a_whole_elicitation_flow_is_counted(backend: Backend) {
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start(&database, &configuration(&fake)).await;
        let mut client = server.client().with_user(USER_HEADER, PRINCIPAL);
        client.initialize().await;
        let session = client.session.clone().expect("a session");
        let mut stream = client.open_stream(None).await;

        let first = client
            .request("tools/call", json!({"name": "me", "arguments": {}}))
            .await;
        let elicitation = elicitations(&first).remove(0);
        let id = elicitation["elicitationId"].as_str().expect("id").to_owned();
        let page = Browser::as_user(USER_HEADER, PRINCIPAL)
            .sign_in(&url_of(&elicitation))
            .await;
        assert_eq!(page.status, StatusCode::OK, "callback page: {}", page.body);
        let (_, completion) = stream.next_message(WAIT).await.expect("completion notification");
        assert_eq!(completion["params"]["elicitationId"], id.as_str());
        let retried = client.call("tools/call", json!({"name": "me", "arguments": {}})).await;
        assert_eq!(retried["isError"], false, "{retried}");

        let text = server.scrape().await;
        assert_values(
            &text,
            &[
                r#"gatehouse_elicitations_total{kind="connection",outcome="created"} 1"#,
                r#"gatehouse_elicitations_total{kind="connection",outcome="completed"} 1"#,
                r#"gatehouse_mcp_requests_total{method="initialize",outcome="ok"} 1"#,
                r#"gatehouse_mcp_requests_total{method="tools/call",outcome="elicitation_required"} 1"#,
                r#"gatehouse_mcp_requests_total{method="tools/call",outcome="ok"} 1"#,
                r#"gatehouse_mcp_request_duration_seconds_count{method="tools/call"} 2"#,
                "gatehouse_elicitation_completion_seconds_count 1",
                "gatehouse_notification_delivery_seconds_count 1",
                "gatehouse_streams_open 1",
                "gatehouse_bus_reconnects_total 0",
            ],
        );
        for series in [
            r#"gatehouse_elicitations_total{kind="connection",outcome="declined"}"#,
            r#"gatehouse_elicitations_total{kind="connection",outcome="failed"}"#,
        ] {
            assert_eq!(value(&text, series), None, "{series} in:\n{text}");
        }
        let pool_max = value(&text, "gatehouse_db_pool_max_connections").expect("pool gauge");
        let pool_open = value(&text, "gatehouse_db_pool_connections").expect("pool gauge");
        assert!(pool_max >= 1.0 && pool_open <= pool_max, "{text}");
        assert!(value(&text, "gatehouse_sessions_active").is_some(), "{text}");

        let values = label_values(&text);
        assert!(
            values.contains(&"tools/call".to_owned()),
            "labels were read: {values:?}"
        );
        for secret in [PRINCIPAL, id.as_str(), session.as_str(), fake.base_url.as_str()] {
            assert!(
                values.iter().all(|v| !v.contains(secret)),
                "a label value holds {secret}: {values:?}"
            );
            assert!(!text.contains(secret), "the scrape holds {secret}");
        }

        let public = reqwest::get(format!("{}/metrics", server.base()))
            .await
            .expect("public listener");
        assert_eq!(
            public.status(),
            StatusCode::NOT_FOUND,
            "no /metrics on the public listener"
        );

        drop(stream);
        common::eventually("the closed stream is no longer counted", async || {
            let text = server.scrape().await;
            (value(&text, "gatehouse_streams_open") == Some(0.0)).then_some(())
        })
        .await;
        server.stop().await;
    }
);

backend_test!(
    /// A sign-in the provider fails, one the user declines, a refreshed token, a refused refresh
    /// that breaks the connection, and a call to an upstream that is down: each is counted under
    /// the configured provider's and upstream's ids.
    async fn failures_refreshes_broken_connections_and_upstream_calls_are_counted(backend: Backend) {
        // Tokens live 30 s, under gatehouse's 60 s margin: every use refreshes first.
        let options = FakeOptions {
            access_token_ttl: Some(30),
            ..FakeOptions::default()
        };
        let fake = FakeProvider::start(options).await;
        let database = TestDatabase::new(backend).await;
        let down = format!("http://127.0.0.1:{}/mcp", common::free_port());
        let toml = format!(
            "{}\n[[upstreams]]\nid = \"down\"\nurl = \"{down}\"\ntools = [\"t\"]\ntimeout = \"1s\"\n",
            configuration(&fake)
        );
        let server = TestServer::start(&database, &toml).await;
        let mut client = server.client().with_user(USER_HEADER, PRINCIPAL);
        client.initialize().await;
        let call = |tool: &'static str| client.request("tools/call", json!({"name": tool, "arguments": {}}));
        let browser = || Browser::as_user(USER_HEADER, PRINCIPAL);

        let elicitation = elicitations(&call("me").await).remove(0);
        fake.set_authorize_outcome(AuthorizeOutcome::Fail);
        let page = browser().sign_in(&url_of(&elicitation)).await;
        assert_eq!(page.status, StatusCode::BAD_GATEWAY, "{}", page.body);
        fake.set_authorize_outcome(AuthorizeOutcome::Deny);
        browser().sign_in(&url_of(&elicitation)).await;
        let declined = call("me").await;
        assert_eq!(
            declined.body["result"]["isError"], true,
            "the decline, once: {:?}",
            declined.body
        );
        fake.set_authorize_outcome(AuthorizeOutcome::Approve);
        let elicitation = elicitations(&call("me").await).remove(0);
        browser().sign_in(&url_of(&elicitation)).await;
        let refreshed = call("me").await;
        assert_eq!(refreshed.body["result"]["isError"], false, "{:?}", refreshed.body);
        fake.revoke_everything();
        assert_eq!(
            elicitations(&call("me").await).len(),
            1,
            "the broken connection asks again"
        );
        let upstream = call("down_t").await;
        assert_eq!(upstream.body["result"]["isError"], true, "{:?}", upstream.body);

        let text = server.scrape().await;
        assert_values(
            &text,
            &[
                r#"gatehouse_elicitations_total{kind="connection",outcome="created"} 3"#,
                r#"gatehouse_elicitations_total{kind="connection",outcome="failed"} 1"#,
                r#"gatehouse_elicitations_total{kind="connection",outcome="declined"} 1"#,
                r#"gatehouse_elicitations_total{kind="connection",outcome="completed"} 1"#,
                r#"gatehouse_token_refresh_total{provider="fake",outcome="refreshed"} 1"#,
                r#"gatehouse_token_refresh_total{provider="fake",outcome="refused"} 1"#,
                r#"gatehouse_connections_broken_total{provider="fake"} 1"#,
                r#"gatehouse_upstream_requests_total{upstream="down",outcome="error"} 1"#,
                r#"gatehouse_mcp_requests_total{method="tools/call",outcome="elicitation_required"} 3"#,
                r#"gatehouse_mcp_requests_total{method="tools/call",outcome="tool_error"} 2"#,
                r#"gatehouse_mcp_requests_total{method="tools/call",outcome="ok"} 1"#,
            ],
        );
        assert!(!text.contains(PRINCIPAL) && !text.contains(&fake.base_url), "{text}");
        server.stop().await;
    }
);

backend_test!(
    /// Without `server.metrics_bind` nothing is recorded and nothing listens for scrapes.
    async fn metrics_are_off_by_default(backend: Backend) {
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let database = TestDatabase::new(backend).await;
        let toml = format!(
            "{HEADER_IDENTITY}{}",
            fake.configure(include_str!("fixtures/fake_hub.toml"))
        );
        let server = TestServer::start(&database, &toml).await;
        assert!(server.metrics_addr.is_none());
        assert!(!server.state.metrics.is_on());
        let public = reqwest::get(format!("{}/metrics", server.base()))
            .await
            .expect("public listener");
        assert_eq!(public.status(), StatusCode::NOT_FOUND);
        server.stop().await;
    }
);

#[test]
fn metrics_bind_is_validated_naming_the_key() {
    let from_file = load_config("[server]\nmetrics_bind = \"127.0.0.1:9464\"\n", &[]).expect("valid");
    assert_eq!(
        from_file.server.metrics_bind.map(|a| a.to_string()).as_deref(),
        Some("127.0.0.1:9464")
    );
    let from_env = load_config("", &[("GATEHOUSE_SERVER__METRICS_BIND", "127.0.0.1:9465")]).expect("valid");
    assert_eq!(from_env.server.metrics_bind.map(|a| a.port()), Some(9465));
    assert!(
        load_config("", &[]).expect("default").server.metrics_bind.is_none(),
        "off by default"
    );

    for (toml, env) in [
        ("[server]\nmetrics_bind = \"localhost\"\n", vec![]),
        ("", vec![("GATEHOUSE_SERVER__METRICS_BIND", "9464")]),
        (
            "[server]\nbind = \"127.0.0.1:8080\"\nmetrics_bind = \"127.0.0.1:8080\"\n",
            vec![],
        ),
    ] {
        assert_eq!(refusal(toml, &env).0, "server.metrics_bind", "{toml} {env:?}");
    }
}
