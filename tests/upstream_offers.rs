//! Resources, resource templates, prompts and completions of upstream MCP servers through
//! gatehouse, with the official reference server (`@modelcontextprotocol/server-everything`, npm)
//! as the upstream over stdio and over HTTP: listed under gatehouse's names and URIs, read and got
//! on the user's own session, subscriptions' updates relayed to the subscribing client, gated by
//! the upstream's requirements and hidden by its `allow` rule exactly as its tools, in both
//! protocol eras; driven by raw requests and by the official Python and TypeScript SDKs.

mod common;

use std::time::Duration;

use common::mcp::{elicitations, url_of};
use common::mcp_upstreams::{server_everything, server_everything_http, stage_ts_client_v2, stage_ts_sdk};
use common::python::python_sdk;
use common::stateless::StatelessClient;
use common::{Backend, TestDatabase, TestServer, eventually_within, repo};
use serde_json::{Value, json};
use tokio::process::Command;

/// The reference server at `index` over stdio, as a TOML `command`.
fn stdio_command(index: &std::path::Path) -> String {
    format!("[\"node\", {:?}, \"stdio\"]", index.to_string_lossy())
}

/// How long the reference server may take to be listed (node starts it first).
const LISTED: Duration = Duration::from_secs(60);

/// The static document every reference server lists, as gatehouse names it for `upstream`.
fn document(upstream: &str) -> String {
    format!("{upstream}+demo://resource/static/document/architecture.md")
}

/// Waits until `client` sees a resource of each upstream in `upstreams`; the resources listed.
async fn listed(client: &common::mcp::McpClient, upstreams: &[&str]) -> Vec<String> {
    eventually_within(LISTED, "the upstreams' resources listed", async || {
        let listed = client.call("resources/list", json!({})).await;
        let uris: Vec<String> = listed["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["uri"].as_str().map(str::to_owned))
            .collect();
        upstreams.iter().all(|u| uris.contains(&document(u))).then_some(uris)
    })
    .await
}

/// `client` subscribes to the reference server's resource `uri` and has it send updates (its
/// `toggle-subscriber-updates` tool); the update arrives on `stream` under gatehouse's URI.
async fn subscribe_and_see_an_update(client: &common::McpClient, stream: &mut common::SseStream, uri: &str) {
    assert_eq!(client.call("resources/subscribe", json!({"uri": uri})).await, json!({}));
    client
        .call(
            "tools/call",
            json!({"name": "se_toggle-subscriber-updates", "arguments": {}}),
        )
        .await;
    let updated = loop {
        let (_, message) = stream.next_message(LISTED).await.expect("a resource update");
        if message["method"] == "notifications/resources/updated" {
            break message;
        }
    };
    assert_eq!(updated["params"]["uri"], uri, "{updated}");
}

/// gatehouse (SQLite) with the reference server at `everything` over stdio as upstream `se`, and
/// a client that sees its resources listed.
async fn behind_gatehouse(everything: &std::path::Path) -> (TestDatabase, TestServer, common::McpClient) {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let config = format!("[[upstreams]]\nid = \"se\"\ncommand = {}\n", stdio_command(everything));
    let server = TestServer::start(&database, &config).await;
    let mut client = server.client();
    client.initialize().await;
    listed(&client, &["se"]).await;
    (database, server, client)
}

fn names(list: &Value, key: &str, field: &str) -> Vec<String> {
    list[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|entry| entry[field].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_servers_resources_prompts_and_completions_through_gatehouse() {
    let Some(everything) = server_everything().await else {
        return;
    };
    let (http_url, _http) = server_everything_http(&everything).await;
    let stdio = stdio_command(&everything);
    let database = TestDatabase::new(Backend::Sqlite).await;
    let toml =
        format!("[[upstreams]]\nid = \"se\"\ncommand = {stdio}\n\n[[upstreams]]\nid = \"sh\"\nurl = \"{http_url}\"\n");
    let server = TestServer::start(&database, &toml).await;
    let mut client = server.client();
    client.initialize().await;
    let uris = listed(&client, &["se", "sh"]).await;
    assert!(
        uris.iter()
            .all(|uri| uri.starts_with("se+demo://") || uri.starts_with("sh+demo://")),
        "every URI names its upstream: {uris:?}"
    );

    // A client that connects now is told what the upstreams offer.
    let mut later = server.client();
    let init = later.initialize().await;
    let capabilities = &init.body["result"]["capabilities"];
    assert_eq!(capabilities["resources"]["subscribe"], true, "{capabilities}");
    assert!(capabilities["prompts"].is_object(), "{capabilities}");
    assert!(capabilities["completions"].is_object(), "{capabilities}");

    for upstream in ["se", "sh"] {
        let templates = client.call("resources/templates/list", json!({})).await;
        let template = format!("{upstream}+demo://resource/dynamic/text/{{resourceId}}");
        assert!(
            names(&templates, "resourceTemplates", "uriTemplate").contains(&template),
            "{templates}"
        );
        // A URI from the template reads through the upstream, and comes back under gatehouse's name.
        let uri = format!("{upstream}+demo://resource/dynamic/text/3");
        let read = client.call("resources/read", json!({"uri": uri})).await;
        assert_eq!(read["contents"][0]["uri"], uri, "{read}");
        assert!(
            read["contents"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .contains("Resource 3"),
            "{read}"
        );
        // The upstream's own error for a resource it does not have is passed on.
        let missing = client
            .request(
                "resources/read",
                json!({"uri": format!("{upstream}+demo://nothing/here")}),
            )
            .await;
        assert!(missing.body["error"]["code"].is_i64(), "{}", missing.body);

        let prompts = client.call("prompts/list", json!({})).await;
        let args_prompt = format!("{upstream}_args-prompt");
        assert!(names(&prompts, "prompts", "name").contains(&args_prompt), "{prompts}");
        let got = client
            .call(
                "prompts/get",
                json!({"name": args_prompt, "arguments": {"city": "Paris"}}),
            )
            .await;
        assert!(got.to_string().contains("Paris"), "{got}");

        let completed = client
            .call(
                "completion/complete",
                json!({"ref": {"type": "ref/prompt", "name": format!("{upstream}_completable-prompt")},
                       "argument": {"name": "department", "value": "Eng"}}),
            )
            .await;
        assert_eq!(completed["completion"]["values"], json!(["Engineering"]), "{completed}");
        let completed = client
            .call(
                "completion/complete",
                json!({"ref": {"type": "ref/resource", "uri": template},
                       "argument": {"name": "resourceId", "value": "4"}}),
            )
            .await;
        assert_eq!(completed["completion"]["values"], json!(["4"]), "{completed}");
    }

    // A URI of no upstream is not found, without asking anyone.
    let unknown = client
        .request("resources/read", json!({"uri": "nobody+demo://x"}))
        .await;
    assert_eq!(unknown.body["error"]["code"], -32002, "{}", unknown.body);
    let unknown = client
        .request("prompts/get", json!({"name": "se_no-such-prompt"}))
        .await;
    assert_eq!(unknown.body["error"]["code"], -32602, "{}", unknown.body);

    // The stateless era: the same lists, reads and prompts.
    let modern = StatelessClient::new(&server.url);
    let discovered = modern.result("server/discover", json!({})).await;
    assert!(discovered["capabilities"]["resources"].is_object(), "{discovered}");
    let read = modern.result("resources/read", json!({"uri": document("sh")})).await;
    assert_eq!(read["contents"][0]["uri"], document("sh"), "{read}");
    assert_eq!(read["resultType"], "complete", "{read}");
    assert_eq!(
        (&read["ttlMs"], &read["cacheScope"]),
        (&json!(0), &json!("private")),
        "{read}"
    );
    let got = modern
        .result(
            "prompts/get",
            json!({"name": "se_args-prompt", "arguments": {"city": "Oslo"}}),
        )
        .await;
    assert!(got.to_string().contains("Oslo"), "{got}");
    let listed = modern.result("resources/list", json!({})).await;
    assert!(names(&listed, "resources", "uri").contains(&document("se")), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_lists_reads_gets_and_completes_through_gatehouse_in_both_eras() {
    let Some(everything) = server_everything().await else {
        return;
    };
    let Some(python) = python_sdk().await else {
        return;
    };
    let (_database, server, _client) = behind_gatehouse(&everything).await;
    for mode in ["legacy", "2026-07-28"] {
        // Subscriptions are of the handshake era.
        let subscribe: &[&str] = if mode == "legacy" {
            &[
                "--subscribe",
                "se+demo://resource/static/document/features.md",
                "--trigger",
                "se_toggle-subscriber-updates",
            ]
        } else {
            &[]
        };
        let output = Command::new(&python)
            .arg(repo().join("tests/interop/python_offers.py"))
            .args(["--url", &server.url, "--mode", mode])
            .args(subscribe)
            .args(["--read", &document("se"), "--read", "se+demo://resource/dynamic/text/7"])
            .args(["--prompt", "se_args-prompt", "--args", r#"{"city": "Lima"}"#])
            .args([
                "--complete-prompt",
                "se_completable-prompt",
                "--complete-argument",
                "department=Sa",
            ])
            .output()
            .await
            .expect("run the Python client");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{mode}: {stderr}");
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{mode}: {e}: {stderr}"));
        let expected_version = if mode == "legacy" { "2025-11-25" } else { "2026-07-28" };
        assert_eq!(report["protocolVersion"], expected_version, "{report}");
        assert!(report["resources"].to_string().contains(&document("se")), "{report}");
        assert!(
            report["templates"]
                .to_string()
                .contains("se+demo://resource/dynamic/text/{resourceId}"),
            "{report}"
        );
        assert!(report["prompts"].to_string().contains("se_args-prompt"), "{report}");
        assert_eq!(report["read"][0]["uri"], document("se"), "{report}");
        assert!(
            report["read"][1]["text"]
                .as_str()
                .unwrap_or_default()
                .contains("Resource 7"),
            "{report}"
        );
        assert!(report["prompt"].to_string().contains("Lima"), "{report}");
        assert_eq!(report["completion"], json!(["Sales"]), "{report}");
        if mode == "legacy" {
            assert_eq!(
                report["updated"], "se+demo://resource/static/document/features.md",
                "{report}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdks_list_read_get_complete_and_subscribe_through_gatehouse_in_both_eras() {
    let Some(everything) = server_everything().await else {
        return;
    };
    let (Some(v1), Some(v2)) = (stage_ts_sdk().await, stage_ts_client_v2().await) else {
        return;
    };
    let (_database, server, _client) = behind_gatehouse(&everything).await;
    let document = document("se");
    // The v1 package on 2025-11-25, subscribed to the document (the reference server sends updates
    // of subscribed resources once the tool turns them on); the v2 client pinned to 2026-07-28.
    let subscribe = ["--subscribe", &document, "--call", "se_toggle-subscriber-updates"];
    let pin = ["--mode", "2026-07-28"];
    let eras = [
        (&v1, "@modelcontextprotocol/sdk", "2025-11-25", "Lima", &subscribe[..]),
        (&v2, "@modelcontextprotocol/client", "2026-07-28", "Quito", &pin[..]),
    ];
    for (stage, package, era, city, extra) in eras {
        let output = Command::new("node")
            .arg(repo().join("tests/interop/ts_offers.mjs"))
            .arg("--sdk")
            .arg(stage)
            .args([
                "--url",
                &server.url,
                "--read",
                &document,
                "--read",
                "se+demo://resource/dynamic/text/7",
            ])
            .args([
                "--prompt",
                "se_args-prompt",
                "--args",
                &json!({"city": city}).to_string(),
            ])
            .args([
                "--complete-prompt",
                "se_completable-prompt",
                "--complete-argument",
                "department=Eng",
            ])
            .args(extra)
            .output()
            .await
            .expect("run the TypeScript client");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{era}: {stderr}");
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{era}: {e}: {stderr}"));
        assert_eq!(report["package"], package, "{report}");
        assert_eq!(report["protocolVersion"], era, "{report}");
        let resources = names(&report, "resources", "uri");
        assert!(resources.contains(&document), "{report}");
        assert!(resources.iter().all(|uri| uri.starts_with("se+demo://")), "{report}");
        let templates = names(&report, "templates", "uriTemplate");
        assert!(
            templates.contains(&"se+demo://resource/dynamic/text/{resourceId}".to_owned()),
            "{report}"
        );
        let prompts = names(&report, "prompts", "name");
        assert!(prompts.contains(&"se_args-prompt".to_owned()), "{report}");
        assert!(prompts.iter().all(|name| name.starts_with("se_")), "{report}");
        let read = &report["read"];
        assert_eq!(read[0]["uri"], document, "{report}");
        assert!(
            read[0]["text"]
                .as_str()
                .unwrap_or_default()
                .starts_with("# Everything Server"),
            "{report}"
        );
        assert_eq!(read[1]["uri"], "se+demo://resource/dynamic/text/7", "{report}");
        assert!(
            read[1]["text"].as_str().unwrap_or_default().contains("Resource 7"),
            "{report}"
        );
        let text = report["prompt"]["messages"][0]["content"]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(text.contains(city), "{report}");
        assert_eq!(report["completion"], json!(["Engineering"]), "{report}");
        if era == "2025-11-25" {
            assert_eq!(report["updated"]["uri"], document, "{report}");
        } else {
            assert_eq!(report["updated"], Value::Null, "{report}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribed_client_gets_the_upstreams_resource_updates_on_its_stream() {
    let Some(everything) = server_everything().await else {
        return;
    };
    let (_database, _server, client) = behind_gatehouse(&everything).await;
    let mut stream = client.open_stream(None).await;
    let uri = document("se");
    subscribe_and_see_an_update(&client, &mut stream, &uri).await;
    assert_eq!(
        client.call("resources/unsubscribe", json!({"uri": uri})).await,
        json!({})
    );
}

/// A reference server that needs the user's API key (a hosted form) first, visible to the `eng`
/// group only (header identity, with groups).
fn gated_config(stdio: &str) -> String {
    format!(
        "[identity]\nmode = \"header\"\ngroups_header = \"x-forwarded-groups\"\n[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n[[forms]]\nid = \"key\"\ntitle = \"Your key\"\n[[forms.fields]]\nname = \"token\"\nlabel = \"Key\"\ntype = \"secret\"\n\n\
         [[upstreams]]\nid = \"se\"\ncommand = {stdio}\nenv = {{ API_KEY = \"{{{{form.key.token}}}}\" }}\nrequires = [\"form:key\"]\nallow = {{ groups = [\"eng\"] }}\n"
    )
}

backend_test!(
    async fn reading_a_gated_upstreams_resource_asks_for_its_form_first_and_allow_hides_it(backend: Backend) {
        let Some(everything) = server_everything().await else {
            return;
        };
        let stdio = stdio_command(&everything);
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start(&database, &gated_config(&stdio)).await;
        let mut alice = server
            .client()
            .with_user("x-forwarded-user", "alice")
            .with_header("x-forwarded-groups", "eng");
        alice
            .initialize_with("2025-11-25", json!({"elicitation": {"url": {}}}))
            .await;
        let uri = document("se");

        // Before alice has given her key: the link to the form, in data and in the message.
        let asked = alice.request("resources/read", json!({"uri": uri})).await;
        assert_eq!(asked.body["error"]["code"], -32042, "{}", asked.body);
        let listed = elicitations(&asked);
        assert_eq!(listed.len(), 1, "{}", asked.body);
        let url = url_of(&listed[0]);
        assert!(
            asked.body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains(&url),
            "{}",
            asked.body
        );
        // The stateless era asks the same with input_required.
        let modern = StatelessClient::new(&server.url)
            .with_user("x-forwarded-user", "alice")
            .with_user("x-forwarded-groups", "eng");
        let required = modern.result("resources/read", json!({"uri": uri})).await;
        assert_eq!(required["resultType"], "input_required", "{required}");
        assert!(
            required.to_string().contains("/forms/"),
            "a link to the form: {required}"
        );

        server.fill_in_form(&url, "alice", "k-123").await;

        let read = alice.call("resources/read", json!({"uri": uri})).await;
        assert_eq!(read["contents"][0]["uri"], uri, "{read}");
        // The stateless retry, with the state and the answer to its link, now reads too.
        let key = required["inputRequests"]
            .as_object()
            .and_then(|requests| requests.keys().next().cloned())
            .expect("an input request");
        let retried = modern
            .result(
                "resources/read",
                json!({"uri": uri, "requestState": required["requestState"], "inputResponses": {key: {"action": "accept"}}}),
            )
            .await;
        assert_eq!(retried["contents"][0]["uri"], uri, "{retried}");
        // Listed once alice's session listed the upstream; bob sees none of it and cannot read it.
        eventually_within(LISTED, "the upstream listed through alice", async || {
            let listed = alice.call("prompts/list", json!({})).await;
            names(&listed, "prompts", "name")
                .contains(&"se_args-prompt".to_owned())
                .then_some(())
        })
        .await;
        let got = modern
            .result(
                "prompts/get",
                json!({"name": "se_args-prompt", "arguments": {"city": "Rome"}}),
            )
            .await;
        assert!(got.to_string().contains("Rome"), "{got}");
        let alices = alice.call("resources/list", json!({})).await;
        assert!(names(&alices, "resources", "uri").contains(&uri), "{alices}");
        let bob = server.eliciting_client("bob").await;
        assert_eq!(bob.call("resources/list", json!({})).await, json!({"resources": []}));
        assert_eq!(bob.call("prompts/list", json!({})).await, json!({"prompts": []}));
        let refused = bob.request("resources/read", json!({"uri": uri})).await;
        assert_eq!(refused.body["error"]["code"], -32002, "{}", refused.body);
    }
);

postgres_test!(
    /// Two replicas on one database: the client subscribes through replica A (whose session with
    /// the upstream gets the update) and holds its stream on replica B, where the update arrives.
    async fn a_resource_update_on_one_replica_reaches_the_stream_on_another() {
        let Some(everything) = server_everything().await else {
            return;
        };
        let config = format!("[[upstreams]]\nid = \"se\"\ncommand = {}\n", stdio_command(&everything));
        let database = TestDatabase::new(Backend::Postgres).await;
        let a = TestServer::start(&database, &config).await;
        let b = TestServer::start(&database, &config).await;
        let mut client = a.client();
        client.initialize().await;
        listed(&client, &["se"]).await;
        let mut stream = client.on(&b).open_stream(None).await;
        subscribe_and_see_an_update(&client, &mut stream, &document("se")).await;
        a.stop().await;
        b.stop().await;
    }
);

postgres_test!(
    /// What one replica listed through a user's session is stored and offered by the other, which
    /// never opened a session with the upstream.
    async fn an_upstreams_resources_and_prompts_listed_on_one_replica_are_offered_by_another() {
        let Some(everything) = server_everything().await else {
            return;
        };
        let config = gated_config(&stdio_command(&everything));
        let database = TestDatabase::new(Backend::Postgres).await;
        let a = TestServer::start(&database, &config).await;
        let b = TestServer::start(&database, &config).await;
        let alice_on = |server: &TestServer| {
            server
                .client()
                .with_user("x-forwarded-user", "alice")
                .with_header("x-forwarded-groups", "eng")
        };
        let mut alice = alice_on(&a);
        alice
            .initialize_with("2025-11-25", json!({"elicitation": {"url": {}}}))
            .await;
        let asked = alice.request("resources/read", json!({"uri": document("se")})).await;
        let link = elicitations(&asked);
        assert_eq!(link.len(), 1, "{}", asked.body);
        a.fill_in_form(&url_of(&link[0]), "alice", "k-456").await;
        alice.call("resources/read", json!({"uri": document("se")})).await;

        let mut on_b = alice_on(&b);
        on_b.initialize().await;
        eventually_within(LISTED, "B offers what A listed", async || {
            let resources = on_b.call("resources/list", json!({})).await;
            let prompts = on_b.call("prompts/list", json!({})).await;
            (names(&resources, "resources", "uri").contains(&document("se"))
                && names(&prompts, "prompts", "name").contains(&"se_args-prompt".to_owned()))
            .then_some(())
        })
        .await;
        assert_eq!(
            b.state.upstreams.open_sessions(),
            0,
            "B never asked the upstream itself"
        );
        a.stop().await;
        b.stop().await;
    }
);
