//! `auth = "mcp"`: gatehouse signs each user in to a remote MCP server that has its own
//! authorization server, by itself. Against the official TypeScript SDK's example server with
//! its demo authorization server (dynamic registration), driven by the official Python and
//! TypeScript SDK clients; and against a fake remote server (`fake_mcp_auth`) whose every
//! request is recorded: one registration across users, restarts and replicas, each user's own
//! token, `resource` and PKCE on every request, refresh, step-up, renewal of a forgotten client,
//! Client ID Metadata Documents, revocation. The probes are in `remote_mcp_probes.rs`.

mod common;

use common::fake_mcp_auth::FakeMcpAuth;
use common::mcp_upstreams::{TsExampleServer, stage_ts_sdk};
use common::python::{PythonScript, python_sdk};
use common::{Backend, Browser, HEADER_IDENTITY, McpClient, TestDatabase, TestServer, elicitations, url_of};
use serde_json::{Value, json};

/// gatehouse with header identity (`server` lines added to its `[server]` table) and the remote
/// server at `url` as the upstream `notes`.
fn config(url: &str, tools: &[&str], server: &str) -> String {
    let tools: Vec<String> = tools.iter().map(|t| format!("{t:?}")).collect();
    let identity = HEADER_IDENTITY.replacen("[server]\n", &format!("[server]\n{server}\n"), 1);
    format!(
        "{identity}\n[[upstreams]]\nid = \"notes\"\nurl = \"{url}\"\nauth = \"mcp\"\ntools = [{}]\ntimeout = \"10s\"\n",
        tools.join(", ")
    )
}

async fn client_of(server: &TestServer, user: &str) -> McpClient {
    server.eliciting_client(user).await
}

/// `user` calls `tool`, is asked to sign in, signs in in the browser, and calls again: the result.
async fn signed_in_call(client: &McpClient, user: &str, tool: &str) -> Value {
    let asked = client
        .request("tools/call", json!({"name": tool, "arguments": {}}))
        .await;
    let listed = elicitations(&asked);
    assert_eq!(listed.len(), 1, "{}", asked.body);
    let page = Browser::as_user("x-forwarded-user", user)
        .sign_in(&url_of(&listed[0]))
        .await;
    assert_eq!(page.status, reqwest::StatusCode::OK, "{}", page.body);
    call(client, tool).await
}

async fn call(client: &McpClient, tool: &str) -> Value {
    client.call("tools/call", json!({"name": tool, "arguments": {}})).await
}

/// The JSON the fake's `whoami` answers: the account, resource and client of the token it got.
fn whoami(result: &Value) -> Value {
    assert_ne!(result["isError"], json!(true), "{result}");
    serde_json::from_str(result["content"][0]["text"].as_str().expect("text")).expect("whoami JSON")
}

async fn registrations(database: &TestDatabase) -> i64 {
    database.query_count("SELECT COUNT(*) FROM oauth_registrations").await
}

backend_test!(
    /// The TypeScript SDK's example server with `--oauth`: the Python SDK as alice and the
    /// TypeScript SDK as bob each meet -32042, sign in in the browser, get the completion and
    /// retry; gatehouse registered once (dynamic registration) and keeps a connection per user.
    async fn the_sdks_sign_in_to_the_typescript_example_server_through_gatehouse(backend: Backend) {
        let Some(python) = python_sdk().await else {
            return;
        };
        let Some(stage) = stage_ts_sdk().await else {
            return;
        };
        let Some(upstream) = TsExampleServer::start_with_oauth().await else {
            return;
        };
        let database = TestDatabase::new(backend).await;
        let toml = config(upstream.url(), &["greet"], "");
        let server = TestServer::start(&database, &toml).await;
        let args = [
            "--url",
            &server.url,
            "--call",
            "notes_greet",
            "--args",
            r#"{"name":"Ada"}"#,
        ];
        let stage = stage.to_string_lossy().into_owned();
        let runs = [
            ("alice", python.clone(), "tests/interop/python_elicitation.py", vec![]),
            (
                "bob",
                "node".into(),
                "tests/interop/ts_elicitation.mjs",
                vec!["--sdk", stage.as_str()],
            ),
        ];
        for (user, interpreter, script, mut sdk_args) in runs {
            sdk_args.extend(args);
            sdk_args.extend(["--user", user, "--timeout", "60"]);
            let mut script = PythonScript::start(&interpreter, script, &sdk_args);
            let mut events = Vec::new();
            while let Some(event) = script.next().await {
                if event["event"] == "elicitation" {
                    let page = Browser::as_user("x-forwarded-user", user)
                        .sign_in(event["url"].as_str().expect("url"))
                        .await;
                    assert_eq!(page.status, reqwest::StatusCode::OK, "{}", page.body);
                }
                events.push(event);
            }
            script.succeeded().await;
            let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
            assert_eq!(kinds, ["elicitation", "completed", "result"], "{user}: {events:?}");
            let result = &events[2]["result"];
            assert_eq!(result["isError"], false, "{user}: {events:?}");
            assert_eq!(result["content"][0]["text"], "Hello, Ada!", "{user}: {events:?}");
        }
        assert_eq!(registrations(&database).await, 1, "one registration for both users");
        let connections = database
            .query_count("SELECT COUNT(*) FROM connections WHERE provider = 'notes' AND status = 'active'")
            .await;
        assert_eq!(connections, 2, "a connection each");
        server.stop().await;
    }
);

backend_test!(
    /// Each user signs in once and holds their own token, bound to the server as `resource`, got
    /// with PKCE; gatehouse registered once, and a restart (and on PostgreSQL a second replica)
    /// signs the next users in with the same client.
    async fn one_registration_serves_every_user_across_restarts_and_replicas(backend: Backend) {
        let fake = FakeMcpAuth::start().await;
        let database = TestDatabase::new(backend).await;
        let addr = format!("127.0.0.1:{}", common::free_port());
        // Replicas share one public URL, as behind a load balancer: the first one's.
        let toml = config(&fake.mcp_url(), &["whoami"], &format!("public_url = \"http://{addr}\""));
        let server = TestServer::start_on(&database, &toml, &addr).await;
        let mut seen = Vec::new();
        for user in ["alice", "bob"] {
            fake.set_next_user(user);
            let client = client_of(&server, user).await;
            let me = whoami(&signed_in_call(&client, user, "notes_whoami").await);
            assert_eq!(me["account"], user, "{me}");
            assert_eq!(me["resource"], fake.mcp_url(), "{me}");
            seen.push(me["client_id"].clone());
            // Called again: the stored connection serves, no new sign-in.
            assert_eq!(whoami(&call(&client, "notes_whoami").await)["account"], user);
        }
        let stats = fake.stats();
        assert_eq!(stats.registrations.len(), 1, "{:?}", stats.registrations);
        assert_eq!(seen[0], seen[1]);
        let registered = &stats.registrations[0];
        assert_eq!(
            registered["redirect_uris"],
            json!([format!("{}/oauth/callback/notes", server.base())]),
            "the upstream's own redirect URI"
        );
        for asked in &stats.authorize_requests {
            let param = |name: &str| asked.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
            assert_eq!(param("resource").as_deref(), Some(fake.mcp_url().as_str()));
            assert_eq!(param("code_challenge_method").as_deref(), Some("S256"));
            assert_eq!(param("scope").as_deref(), Some("mcp"), "the challenge's scope");
        }
        let exchanges: Vec<_> = stats
            .token_requests
            .iter()
            .filter(|t| t.grant_type == "authorization_code")
            .collect();
        assert_eq!(exchanges.len(), 2);
        for exchange in &exchanges {
            assert_eq!(exchange.param("resource"), Some(fake.mcp_url().as_str()));
            assert!(exchange.param("code_verifier").is_some());
        }
        let mut tokens = stats.mcp_bearer_tokens.clone();
        tokens.sort();
        tokens.dedup();
        assert_eq!(tokens.len(), 2, "one token per user, each used twice");

        // Restarted at the same address: the same redirect URI, so the same registration.
        let addr = server.addr.to_string();
        server.stop().await;
        let restarted = TestServer::start_on(&database, &toml, &addr).await;
        fake.set_next_user("carol");
        let carol = client_of(&restarted, "carol").await;
        let me = whoami(&signed_in_call(&carol, "carol", "notes_whoami").await);
        assert_eq!(
            (me["account"].clone(), me["client_id"].clone()),
            (json!("carol"), seen[0].clone())
        );
        if backend == Backend::Postgres {
            let second = TestServer::start(&database, &toml).await;
            fake.set_next_user("dave");
            let dave = client_of(&second, "dave").await;
            let me = whoami(&signed_in_call(&dave, "dave", "notes_whoami").await);
            assert_eq!(me["client_id"], seen[0], "the replica uses the stored registration");
            second.stop().await;
        }
        assert_eq!(fake.stats().registrations.len(), 1, "never registered again");
        assert_eq!(registrations(&database).await, 1);
        restarted.stop().await;
    }
);

backend_test!(
    /// Tokens about to expire are refreshed with `resource`; a tool that needs a scope the token
    /// lacks (403 insufficient_scope) asks for a sign-in with it; disconnecting revokes at the
    /// server; a token the server no longer takes asks for a new sign-in.
    async fn refresh_step_up_revocation_and_a_refused_token(backend: Backend) {
        let fake = FakeMcpAuth::start().await;
        // Expiring within gatehouse's refresh margin: every use refreshes first.
        fake.set_options(|o| o.access_token_ttl = Some(30));
        let database = TestDatabase::new(backend).await;
        let toml = config(&fake.mcp_url(), &["whoami", "admin_only"], "");
        let server = TestServer::start(&database, &toml).await;
        let client = client_of(&server, "alice").await;
        whoami(&signed_in_call(&client, "alice", "notes_whoami").await);
        whoami(&call(&client, "notes_whoami").await);
        let refreshes: Vec<_> = fake
            .stats()
            .token_requests
            .into_iter()
            .filter(|t| t.grant_type == "refresh_token")
            .collect();
        assert!(!refreshes.is_empty(), "the second call refreshed first");
        assert_eq!(refreshes[0].param("resource"), Some(fake.mcp_url().as_str()));

        // Step-up: admin_only answers 403 insufficient_scope with scope="admin".
        let stepped = signed_in_call(&client, "alice", "notes_admin_only").await;
        assert_ne!(stepped["isError"], json!(true), "{stepped}");
        let last = fake
            .stats()
            .authorize_requests
            .last()
            .cloned()
            .expect("an authorize request");
        let scope = last
            .iter()
            .find(|(k, _)| k == "scope")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let mut scopes: Vec<&str> = scope.split(' ').collect();
        scopes.sort_unstable();
        assert_eq!(scopes, ["admin", "mcp"], "what was granted plus what was missing");

        // Disconnecting revokes at the server.
        let revoked_before = fake.stats().revoked_tokens.len();
        let arguments = json!({"provider": "notes"});
        let disconnected = client
            .call("tools/call", json!({"name": "disconnect", "arguments": arguments}))
            .await;
        assert_eq!(disconnected["isError"], false, "{disconnected}");
        assert!(
            fake.stats().revoked_tokens.len() > revoked_before,
            "revoked at the server"
        );

        // Signed in again, then the server stops taking every token: a new sign-in is asked for.
        fake.set_options(|o| o.access_token_ttl = Some(3600));
        whoami(&signed_in_call(&client, "alice", "notes_whoami").await);
        fake.revoke_all_tokens();
        let refused = client
            .request("tools/call", json!({"name": "notes_whoami", "arguments": {}}))
            .await;
        let asked = match refused.body["error"]["code"].as_i64() {
            Some(-32042) => elicitations(&refused),
            // The 401 broke the connection during the call; the next call asks.
            _ => elicitations(
                &client
                    .request("tools/call", json!({"name": "notes_whoami", "arguments": {}}))
                    .await,
            ),
        };
        assert_eq!(asked.len(), 1);
        server.stop().await;
    }
);

backend_test!(
    /// The server forgot gatehouse's client (`invalid_client` at its token endpoint): the stored
    /// registration is dropped, gatehouse registers again, and the user signs in with the new
    /// client.
    async fn a_forgotten_client_is_registered_again(backend: Backend) {
        let fake = FakeMcpAuth::start().await;
        fake.set_options(|o| o.access_token_ttl = Some(30));
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start(&database, &config(&fake.mcp_url(), &["whoami"], "")).await;
        let client = client_of(&server, "alice").await;
        let first = whoami(&signed_in_call(&client, "alice", "notes_whoami").await);
        fake.forget_clients();
        // The refresh is refused with invalid_client: a new sign-in, with a new client.
        let again = whoami(&signed_in_call(&client, "alice", "notes_whoami").await);
        assert_ne!(first["client_id"], again["client_id"]);
        assert_eq!(fake.stats().registrations.len(), 2);
        assert_eq!(registrations(&database).await, 1, "the forgotten one was dropped");
        server.stop().await;
    }
);

backend_test!(
    /// An authorization server that takes Client ID Metadata Documents fetches gatehouse's, and
    /// the sign-in completes without any registration.
    async fn a_client_id_metadata_document_needs_no_registration(backend: Backend) {
        let fake = FakeMcpAuth::start().await;
        fake.set_options(|o| o.cimd_supported = true);
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start(&database, &config(&fake.mcp_url(), &["whoami"], "")).await;
        let client = client_of(&server, "alice").await;
        let me = whoami(&signed_in_call(&client, "alice", "notes_whoami").await);
        let document_url = format!("{}/oauth/client-metadata/notes", server.base());
        assert_eq!(me["client_id"], document_url);
        let stats = fake.stats();
        assert!(stats.registrations.is_empty(), "{:?}", stats.registrations);
        assert!(stats.cimd_fetches.contains(&document_url), "{:?}", stats.cimd_fetches);
        assert_eq!(registrations(&database).await, 0);
        let document: Value = reqwest::get(&document_url)
            .await
            .expect("fetch")
            .json()
            .await
            .expect("JSON");
        assert_eq!(document["client_id"], document_url);
        assert_eq!(
            document["redirect_uris"],
            json!([format!("{}/oauth/callback/notes", server.base())])
        );
        // No document is shared by every server, nor served for a server not signed in with one.
        for other in ["/oauth/client-metadata.json", "/oauth/client-metadata/elsewhere"] {
            let answer = reqwest::get(format!("{}{other}", server.base())).await.expect("fetch");
            assert_eq!(answer.status(), reqwest::StatusCode::NOT_FOUND, "{other}");
        }
        // whoami shows the connection like any other.
        let listed = call(&client, "whoami").await;
        assert!(listed.to_string().contains("notes"), "{listed}");
        server.stop().await;
    }
);
