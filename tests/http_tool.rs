//! HTTP tools declared in configuration, calling a real upstream HTTP server on loopback.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};
use common::fake_oauth::{FakeOptions, FakeProvider};
use common::upstream::{self, Log, record, serve};
use common::{Backend, Browser, McpClient, TestDatabase, TestServer, elicitations, text, url_of};
use serde_json::{Value, json};

async fn upstream() -> (SocketAddr, Log) {
    let log = Log::default();
    let app = Router::new()
        .route(
            "/users/{name}",
            get(
                |state: State<Log>, Path(name): Path<String>, uri: axum::http::Uri, headers: HeaderMap| async move {
                    record(state, uri, headers, Bytes::new()).await;
                    axum::Json(json!({"login": name, "id": 42}))
                },
            ),
        )
        .route(
            "/echo",
            post(
                |state: State<Log>, uri: axum::http::Uri, headers: HeaderMap, body: Bytes| async move {
                    let seen = record(state, uri, headers, body).await;
                    ([("content-type", "text/plain")], format!("got {}", seen.body))
                },
            ),
        )
        .route("/array", get(|| async { axum::Json(json!([1, 2, 3])) }))
        .route(
            "/broken",
            get(|| async { (StatusCode::BAD_GATEWAY, "upstream says no") }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                "late"
            }),
        )
        .route("/huge", get(|| async { "x".repeat(64 * 1024) }))
        .route(
            "/redirect",
            get(|| async { Redirect::temporary("http://example.com/") }),
        )
        .route(
            "/search",
            get(
                |state: State<Log>,
                 Query(q): Query<Vec<(String, String)>>,
                 uri: axum::http::Uri,
                 headers: HeaderMap| async move {
                    record(state, uri, headers, Bytes::new()).await;
                    axum::Json(json!({"params": q})).into_response()
                },
            ),
        )
        .with_state(log.clone());
    (serve(app).await, log)
}

/// The tools under test, calling `upstream`.
fn tools(upstream: SocketAddr) -> String {
    include_str!("fixtures/http_tools.toml").replace("UPSTREAM", &upstream.to_string())
}

async fn setup(backend: Backend) -> (TestDatabase, TestServer, common::McpClient, Log) {
    let (addr, log) = upstream().await;
    let database = TestDatabase::new(backend).await;
    let server = TestServer::start(&database, &tools(addr)).await;
    let mut client = server.client();
    client.initialize().await;
    (database, server, client, log)
}

backend_test!(
    async fn http_tools_fill_templates_safely(backend: Backend) {
        let (_database, server, client, log) = setup(backend).await;
        let listed = client.call("tools/list", json!({})).await;
        let user = listed["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .find(|t| t["name"] == "user")
            .expect("user tool")
            .clone();
        assert_eq!(user["title"], "GitHub-like user");
        assert_eq!(user["inputSchema"]["required"], json!(["name"]));
        assert_eq!(user["annotations"]["readOnlyHint"], true);

        let result = client
            .call(
                "tools/call",
                json!({"name": "user", "arguments": {"name": "octo cat/../admin"}}),
            )
            .await;
        assert_eq!(result["isError"], false, "{result}");
        assert_eq!(
            result["structuredContent"],
            json!({"login": "octo cat/../admin", "id": 42})
        );
        assert_eq!(
            serde_json::from_str::<Value>(&text(&result)).expect("JSON text"),
            result["structuredContent"]
        );
        let seen = log.lock().expect("log").pop().expect("request");
        assert_eq!(
            seen.path, "/users/octo%20cat%2F..%2Fadmin",
            "the argument stays one path segment"
        );
        assert!(
            seen.headers
                .contains(&("x-requested-for".into(), "octo cat/../admin".into()))
        );

        client
            .call(
                "tools/call",
                json!({"name": "search", "arguments": {"q": "a&b=c", "page": 2}}),
            )
            .await;
        assert_eq!(
            log.lock().expect("log").pop().expect("request").query,
            "q=a%26b%3Dc&page=2"
        );
        // A header value cannot smuggle another header.
        let smuggled = client
            .call(
                "tools/call",
                json!({"name": "user", "arguments": {"name": "x\r\nX-Admin: 1"}}),
            )
            .await;
        assert_eq!(smuggled["isError"], true);
        server.stop().await;
    }
);

backend_test!(
    async fn http_tools_send_bodies(backend: Backend) {
        let (_database, server, client, log) = setup(backend).await;
        let result = client
            .call(
                "tools/call",
                json!({"name": "create", "arguments": {"title": "Hi \"there\"", "count": 3, "tags": ["a", "b"]}}),
            )
            .await;
        assert_eq!(result["isError"], false, "{result}");
        let seen = log.lock().expect("log").pop().expect("request");
        let body: Value = serde_json::from_str(&seen.body).expect("JSON body");
        assert_eq!(
            body,
            json!({"title": "Hi \"there\"", "count": 3, "tags": ["a", "b"], "note": "by Hi \"there\""})
        );
        assert!(
            seen.headers
                .contains(&("content-type".into(), "application/json".into()))
        );
        // Left-out optional arguments become null (whole placeholders) or empty text.
        client
            .call("tools/call", json!({"name": "create", "arguments": {}}))
            .await;
        let body: Value =
            serde_json::from_str(&log.lock().expect("log").pop().expect("request").body).expect("JSON body");
        assert_eq!(body, json!({"title": null, "count": null, "tags": null, "note": "by "}));

        // A string body that is JSON: values are JSON-escaped inside its strings.
        let title = "x\", \"admin\": true, \"y\": \"\\";
        let result = client
            .call(
                "tools/call",
                json!({"name": "json_text", "arguments": {"title": title}}),
            )
            .await;
        assert_eq!(result["isError"], false, "{result}");
        let seen = log.lock().expect("log").pop().expect("request");
        assert_eq!(seen.json(), json!({"title": title, "source": "gatehouse"}));
        assert!(
            seen.headers
                .contains(&("content-type".into(), "application/json".into()))
        );

        let result = client
            .call("tools/call", json!({"name": "text", "arguments": {"msg": "hello"}}))
            .await;
        assert_eq!(text(&result), "got message=hello");
        assert!(
            result.get("structuredContent").is_none(),
            "plain text has no structured content"
        );
        let array = client.call("tools/call", json!({"name": "array"})).await;
        assert_eq!(text(&array), "[1,2,3]");
        assert!(
            array.get("structuredContent").is_none(),
            "structured content must be an object"
        );
        server.stop().await;
    }
);

backend_test!(
    async fn upstream_failures_are_tool_errors(backend: Backend) {
        let (_database, server, client, _log) = setup(backend).await;
        let broken = client.call("tools/call", json!({"name": "broken"})).await;
        assert_eq!(broken["isError"], true);
        assert!(
            text(&broken).contains("502") && text(&broken).contains("upstream says no"),
            "{broken}"
        );
        let slow = client.call("tools/call", json!({"name": "slow"})).await;
        assert_eq!(slow["isError"], true);
        assert!(text(&slow).contains("did not answer within 300ms"), "{slow}");
        let huge = client.call("tools/call", json!({"name": "huge"})).await;
        assert_eq!(huge["isError"], true);
        assert!(text(&huge).contains("more than 1024 bytes"), "{huge}");
        let redirect = client.call("tools/call", json!({"name": "redirect"})).await;
        assert_eq!(redirect["isError"], true);
        assert!(text(&redirect).contains("redirect"), "{redirect}");
        // The server is unharmed.
        assert_eq!(client.call("ping", json!({})).await, json!({}));
        server.stop().await;
    }
);

/// Calls the `repo` tool of `fixtures/repo_tool.toml`.
async fn repo(client: &McpClient, owner: &str, repo: &str) -> Value {
    client
        .call(
            "tools/call",
            json!({"name": "repo", "arguments": {"owner": owner, "repo": repo}}),
        )
        .await
}

backend_test!(
    /// A path placeholder cannot climb out of its template's path: `..` and `.` (which URL parsing
    /// removes) are refused as tool errors before anything is sent, so the user's token never
    /// reaches another path of the API; encoded spellings stay one segment under the template's path.
    async fn path_placeholders_keep_the_token_on_the_templates_path(backend: Backend) {
        let (addr, log) = upstream::recording().await;
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let database = TestDatabase::new(backend).await;
        let toml = fake
            .configure(include_str!("fixtures/repo_tool.toml"))
            .replace("UPSTREAM", &addr.to_string());
        let server = TestServer::start(&database, &toml).await;
        let mut client = server.client();
        client.initialize().await;
        let first = client
            .request(
                "tools/call",
                json!({"name": "repo", "arguments": {"owner": "octo", "repo": "hello"}}),
            )
            .await;
        let page = Browser::new().sign_in(&url_of(&elicitations(&first)[0])).await;
        assert_eq!(page.status, reqwest::StatusCode::OK, "{}", page.body);
        let result = repo(&client, "octo", "hello").await;
        assert_eq!(result["isError"], false, "{result}");
        let seen = log.lock().expect("log").pop().expect("request");
        assert_eq!(seen.path, "/api/repos/octo/hello");
        assert!(
            seen.header("authorization").is_some_and(|h| h.starts_with("Bearer ")),
            "the user's token is sent: {seen:?}"
        );

        for (owner, name, refused) in [
            ("..", "me", "owner"),
            ("..", "..", "owner"),
            (".", "me", "owner"),
            ("octo", "..", "repo"),
            ("octo", ".", "repo"),
        ] {
            let result = repo(&client, owner, name).await;
            assert_eq!(result["isError"], true, "{owner}/{name}: {result}");
            assert!(
                text(&result).contains(&format!("argument `{refused}` is not allowed")),
                "{owner}/{name}: {result}"
            );
            assert!(
                log.lock().expect("log").is_empty(),
                "{owner}/{name} reached the upstream"
            );
        }
        for (owner, segment) in [
            ("%2e%2e", "%252e%252e"),
            ("%2E.", "%252E."),
            (".%2e", ".%252e"),
            ("..\\..", "..%5C.."),
            ("\\..", "%5C.."),
            ("../..", "..%2F.."),
        ] {
            let result = repo(&client, owner, "me").await;
            assert_eq!(result["isError"], false, "{owner}: {result}");
            let seen = log.lock().expect("log").pop().expect("request");
            assert_eq!(seen.path, format!("/api/repos/{segment}/me"), "{owner}");
        }
        server.stop().await;
    }
);

/// A saved secret with every kind of character an encoding escapes.
const SECRET: &str = "sk-ü \"quo/te\"+plus & ~more~ 🔑 end";

/// JSON as PHP writes it: `\/`, and `\uXXXX` for every non-ASCII character.
fn php_json(text: &str) -> String {
    let mut out = String::from("{\"echo\":\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '/' => out.push_str("\\/"),
            c if c.is_ascii() => out.push(c),
            c => c
                .encode_utf16(&mut [0; 2])
                .iter()
                .for_each(|unit| out.push_str(&format!("\\u{unit:04x}"))),
        }
    }
    out.push_str("\"}");
    out
}

/// The upstream's answer when asked to echo `key` as `how`.
fn leak(how: &str, key: &str) -> (StatusCode, &'static str, String) {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    let percent = percent_encoding::utf8_percent_encode(key, percent_encoding::NON_ALPHANUMERIC).to_string();
    let (status, json, body) = match how {
        "raw" => (StatusCode::OK, false, format!("you sent {key}")),
        "base64" => (StatusCode::OK, false, STANDARD.encode(key)),
        "base64url" => (StatusCode::OK, false, URL_SAFE_NO_PAD.encode(key)),
        "blob" => (
            StatusCode::OK,
            false,
            STANDARD.encode(format!("{{\"user\":\"ada\",\"key\":\"{key}\"}}")),
        ),
        "php" => (StatusCode::OK, false, php_json(key)),
        "php-json" => (StatusCode::OK, true, php_json(key)),
        "percent" => (StatusCode::OK, false, format!("https://api.test/?key={percent}")),
        "percent-lower" => (StatusCode::OK, false, percent.to_lowercase()),
        "form" => (
            StatusCode::OK,
            false,
            url::form_urlencoded::byte_serialize(key.as_bytes()).collect(),
        ),
        // A long error whose excerpt (2,048 characters) would end 18 characters into the key.
        _ => (
            StatusCode::BAD_REQUEST,
            false,
            format!("{}{key} was refused", "x".repeat(2030)),
        ),
    };
    (status, if json { "application/json" } else { "text/plain" }, body)
}

backend_test!(
    /// An upstream that echoes the saved secret back, encoded or cut by the error excerpt, never
    /// gets it to the model: every spelling is redacted, and redaction happens before the cut.
    async fn echoed_secrets_are_redacted_in_every_encoding_and_never_cut(backend: Backend) {
        let app = Router::new().route(
            "/leak/{how}",
            post(|Path(how): Path<String>, body: axum::Json<Value>| async move {
                let (status, content_type, answer) = leak(&how, body.0["key"].as_str().unwrap_or_default());
                (status, [("content-type", content_type)], answer)
            }),
        );
        let addr = serve(app).await;
        let database = TestDatabase::new(backend).await;
        let toml = include_str!("fixtures/leaky_tool.toml").replace("UPSTREAM", &addr.to_string());
        let server = TestServer::start(&database, &toml).await;
        let mut client = server.client();
        client.initialize().await;
        let leaky = |how: &str| json!({"name": "leaky", "arguments": {"how": how}});
        let first = client.request("tools/call", leaky("raw")).await;
        let url = url_of(&elicitations(&first)[0]);
        let browser = Browser::new();
        let page = browser.get(&url).await;
        let saved = browser
            .post_form(
                &url,
                &server.base(),
                &[("csrf", &page.csrf()), ("key", SECRET), ("action", "submit")],
            )
            .await;
        assert_eq!(saved.status, reqwest::StatusCode::OK, "{}", saved.body);

        let prefix: String = SECRET.chars().take(3).collect();
        for how in [
            "raw",
            "base64",
            "base64url",
            "blob",
            "php",
            "php-json",
            "percent",
            "percent-lower",
            "form",
            "cut",
        ] {
            let result = client.call("tools/call", leaky(how)).await;
            let shown = text(&result);
            assert!(shown.contains("[redacted]"), "{how}: {result}");
            let (_, _, echoed) = leak(how, SECRET);
            for leaked in [echoed.as_str(), SECRET, &prefix] {
                assert!(!shown.contains(leaked), "{how}: {leaked:?} in {result}");
            }
            if let Some(structured) = result.get("structuredContent") {
                assert_eq!(structured, &json!({"echo": "[redacted]"}), "{how}");
            }
        }
        server.stop().await;
    }
);

#[test]
fn tool_configuration_errors_name_their_key() {
    let cases = [
        (
            "[[tools]]\nname = \"t\"\nhttp = { url = \"https://{{args.host}}/x\" }\ninput_schema = { type = \"object\", properties = { host = { type = \"string\" } } }\n",
            "tools[0].http.url",
        ),
        (
            "[[tools]]\nname = \"t\"\nhttp = { url = \"https://api.test/{{args.nope}}\" }\n",
            "tools[0].http.url",
        ),
        (
            "[[tools]]\nname = \"t\"\nhttp = { url = \"ftp://api.test/\" }\n",
            "tools[0].http.url",
        ),
        (
            "[[tools]]\nname = \"t\"\nhttp = { url = \"https://api.test/\", method = \"FETCH IT\" }\n",
            "tools[0].http.method",
        ),
        (
            "[[tools]]\nname = \"t\"\nhttp = { url = \"https://api.test/\", body = \"x\" }\n",
            "tools[0].http.body",
        ),
        (
            "[[tools]]\nname = \"t\"\nhttp = { url = \"https://api.test/\", headers = { \"bad header\" = \"x\" } }\n",
            "tools[0].http.headers.bad header",
        ),
        (
            "[[tools]]\nname = \"t\"\ninput_schema = { type = \"string\" }\nhttp = { url = \"https://api.test/\" }\n",
            "tools[0].input_schema",
        ),
        (
            "[[tools]]\nname = \"t\"\nhttp = { url = \"https://api.test/\", timeout = \"0s\" }\n",
            "tools[0].http.timeout",
        ),
        (
            "[[tools]]\nname = \"t\"\nhttp = { url = \"https://api.test/a/../{{args.x}}\" }\ninput_schema = { type = \"object\", properties = { x = { type = \"string\" } } }\n",
            "tools[0].http.url",
        ),
        // A string body that is JSON with a placeholder outside a string value.
        (
            "[[tools]]\nname = \"t\"\nhttp = { method = \"POST\", url = \"https://api.test/\", body = '{\"n\": {{args.x}}}' }\ninput_schema = { type = \"object\", properties = { x = { type = \"string\" } } }\n",
            "tools[0].http.body",
        ),
    ];
    for (toml, key) in cases {
        let config = common::config(toml, &[]);
        let providers = gatehouse::providers::Providers::from_config(&config).expect("no providers");
        let forms = gatehouse::forms::Forms::from_config(&config.forms).expect("no forms");
        let error =
            match gatehouse::tools::ToolRegistry::from_config(&config, &providers, &forms, reqwest::Client::new()) {
                Ok(_) => panic!("should be refused: {toml}"),
                Err(error) => error.to_string(),
            };
        assert!(error.contains(&format!("`{key}`")), "{error} should name {key}");
    }
}
