//! A connection's tokens after the sign-in: refreshed once at a time (across replicas too), broken
//! by a refusal, widened to more scopes, revoked by `disconnect`, and the token endpoint's other
//! answer and client authentication forms.

use super::*;

backend_test!(
    async fn expired_tokens_are_refreshed_once_at_a_time(backend: Backend) {
        let options = FakeOptions {
            access_token_ttl: Some(1),
            refresh_delay_ms: 300,
            rotate_refresh_tokens: false,
            ..FakeOptions::default()
        };
        let (s, _stream) = signed_in(backend, options).await;
        let calls: Vec<_> = (0..4)
            .map(|_| {
                let client = s.client.clone();
                tokio::spawn(async move { client.call("tools/call", json!({"name": "me"})).await })
            })
            .collect();
        for call in calls {
            let result = call.await.expect("join");
            assert_eq!(result["isError"], false, "{result}");
        }
        let stats = s.fake.stats();
        assert!(stats.refreshes >= 1);
        assert_eq!(stats.concurrent_refresh_peak, 1, "one refresh per connection at a time");
        assert_eq!(
            stats.issued_refresh_tokens.len(),
            1,
            "the provider sent no new refresh token; the old one was kept"
        );
        let last_seen = stats.api_bearer_tokens.last().expect("a bearer token");
        assert_ne!(
            Some(last_seen),
            stats.issued_access_tokens.first(),
            "calls used a refreshed token"
        );
        s.server.stop().await;
    }
);

backend_test!(
    async fn a_refused_token_or_refresh_breaks_the_connection_and_elicits_again(backend: Backend) {
        let (s, _stream) = signed_in(backend, FakeOptions::default()).await;
        s.fake.revoke_everything();
        let again = elicitations(&call(&s.client, "me").await);
        assert_eq!(again.len(), 1, "a provider 401 makes the call elicit again");
        assert_eq!(
            s.database
                .query_count("SELECT COUNT(*) FROM connections WHERE status = 'broken'")
                .await,
            1
        );
        let whoami = s.client.call("tools/call", json!({"name": "whoami"})).await;
        assert_eq!(whoami["structuredContent"]["connections"][0]["status"], "needs sign-in");

        let options = FakeOptions {
            access_token_ttl: Some(1),
            ..FakeOptions::default()
        };
        let (s, _stream) = signed_in(backend, options).await;
        s.fake.revoke_everything();
        assert_eq!(
            elicitations(&call(&s.client, "me").await).len(),
            1,
            "a refused refresh elicits again"
        );
        s.server.stop().await;
    }
);

backend_test!(
    async fn more_scopes_ask_for_the_union(backend: Backend) {
        let (s, _stream) = signed_in(backend, FakeOptions::default()).await;
        let step_up = elicitation_for(&s.client, "me_write").await;
        assert!(
            step_up["message"]
                .as_str()
                .is_some_and(|m| m.contains("read") && m.contains("write")),
            "{step_up}"
        );
        sign_in(&step_up).await;
        let authorize: std::collections::HashMap<_, _> = s.fake.stats().last_authorize_query.into_iter().collect();
        assert_eq!(authorize["scope"], "read write");
        assert_eq!(
            s.client.call("tools/call", json!({"name": "me_write"})).await["isError"],
            false
        );
        assert_eq!(
            s.client.call("tools/call", json!({"name": "me"})).await["isError"],
            false,
            "the union covers both"
        );
        s.server.stop().await;
    }
);

backend_test!(
    async fn disconnect_removes_and_revokes(backend: Backend) {
        let (s, _stream) = signed_in(backend, FakeOptions::default()).await;
        let result = disconnect(&s.client).await;
        assert_eq!(result["isError"], false, "{result}");
        assert!(text(&result).contains("revoked"));
        assert_eq!(s.fake.stats().revocations, 1);
        assert_eq!(s.database.query_count("SELECT COUNT(*) FROM connections").await, 0);
        let none = disconnect(&s.client).await;
        assert_eq!(none["isError"], true);
        assert_eq!(elicitations(&call(&s.client, "me").await).len(), 1);
        s.server.stop().await;
    }
);

backend_test!(
    async fn form_encoded_token_answers_and_client_secret_post_work(backend: Backend) {
        use common::fake_oauth::{ClientAuth, TokenFormat};
        let options = FakeOptions {
            client_auth: ClientAuth::Post,
            token_format: TokenFormat::Form,
            scope_separator: ',',
            refresh_tokens: false,
            ..FakeOptions::default()
        };
        let s = setup_with(backend, options, |toml| {
            toml.replace(
                "client_auth = \"basic\"",
                "client_auth = \"post\"\nscope_separator = \",\"",
            )
            .replace("scopes = [\"read\"]", "scopes = [\"read\", \"gist\"]")
        })
        .await;
        let mut stream = s.client.open_stream(None).await;
        connect(&s, &mut stream, "me").await;
        let authorize: std::collections::HashMap<_, _> = s.fake.stats().last_authorize_query.into_iter().collect();
        assert_eq!(
            authorize["scope"], "gist,read",
            "scopes joined with the provider's separator"
        );
        assert_eq!(
            s.client.call("tools/call", json!({"name": "me"})).await["isError"],
            false
        );
        let whoami = s.client.call("tools/call", json!({"name": "whoami"})).await;
        assert_eq!(
            whoami["structuredContent"]["connections"][0]["scopes"],
            json!(["gist", "read"]),
            "granted scopes parsed from a form answer"
        );
        s.server.stop().await;
    }
);

postgres_test!(
    /// Calls served by two replicas refresh the same connection one at a time.
    async fn refreshes_are_serialized_across_replicas() {
        let options = FakeOptions {
            access_token_ttl: Some(1),
            refresh_delay_ms: 200,
            ..FakeOptions::default()
        };
        let fake = FakeProvider::start(options).await;
        let database = TestDatabase::new(Backend::Postgres).await;
        let a = TestServer::start(&database, &gatehouse_config(&fake)).await;
        let b = TestServer::start(&database, &gatehouse_config(&fake)).await;
        let mut client = a.client();
        client.initialize().await;
        let elicitation = elicitation_for(&client, "me").await;
        sign_in(&elicitation).await;
        let on_b = client.on(&b);
        let calls: Vec<_> = (0..6)
            .map(|n| {
                let client = if n % 2 == 0 { client.clone() } else { on_b.clone() };
                tokio::spawn(async move { client.call("tools/call", json!({"name": "me"})).await })
            })
            .collect();
        for call in calls {
            assert_eq!(call.await.expect("join")["isError"], false);
        }
        let stats = fake.stats();
        assert!(stats.refreshes >= 2, "both replicas needed fresh tokens");
        assert_eq!(
            stats.concurrent_refresh_peak, 1,
            "never two refreshes of one connection at once"
        );
        a.stop().await;
        b.stop().await;
    }
);
