//! A real browser on gatehouse's pages: headless Chromium opens the URL of a -32042 elicitation,
//! meets a validation error on a hosted form, corrects it with the keyboard alone and submits; and,
//! in `oauth` identity mode, signs in to the pages at the identity provider before connecting a
//! third-party account. The MCP client gets the completion notification and its retried call
//! succeeds. Screenshots of each page are kept under target/browser-artifacts/.

mod common;

use common::browser::{artifact_dir, browser_available, fill_form, walk};
use common::fake_idp::{FakeIdp, FakeIdpOptions, TestClient, TestUser};
use common::fake_oauth::{FakeOptions, FakeProvider};
use common::{Backend, TestDatabase, TestServer};
use serde_json::json;

const SECRET: &str = "sk-browser-0123456789abcdef";

/// A user-scoped form with a secret, a text field, a consent box and a choice; the tool that needs
/// it calls the server's own /healthz (at `addr`) with the key, so the retried call can succeed.
fn config(addr: &str) -> String {
    include_str!("fixtures/openai_form.toml").replace("GATEHOUSE", addr)
}

backend_test!(
    async fn a_person_fills_in_the_form_in_chromium(backend: Backend) {
        if !browser_available() {
            return;
        }
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start_addressed(&database, config).await;
        let mut client = server.client();
        client.initialize().await;
        let mut stream = client.open_stream(None).await;

        let reply = client.request("tools/call", json!({"name": "openai_models"})).await;
        assert_eq!(reply.body["error"]["code"], -32042, "{}", reply.body);
        let elicitation = &reply.body["error"]["data"]["elicitations"][0];
        let url = elicitation["url"].as_str().expect("url").to_owned();
        assert!(url.contains("/forms/"), "{url}");

        let screenshots = artifact_dir(&format!("form-{backend:?}").to_lowercase());
        let hostile = "<script>alert(1)</script> \"quoted\" 'single' — ünïcødé 🙂";
        let plan = json!({
            "url": url,
            "screenshots": screenshots,
            "first": {
                "fill": {"api_key": "short", "org_name": hostile},
                "check": ["consent"],
                "select": {"region": "eu"},
            },
            "expect_error_field": "api_key",
            "second": {"fill": {"api_key": SECRET}},
            "expect_done_heading": "Saved",
            "then_visit": [{
                "url": format!("{}/connections", server.base()),
                "screenshot": "04-connections.png",
                "expect_text": ["OpenAI API key", "stored, hidden", "Europe", hostile],
                "absent_text": [SECRET, "<script>alert(1)"],
            }],
        });
        let outcome = tokio::task::spawn_blocking(move || fill_form(&plan))
            .await
            .expect("join");
        let result = outcome.unwrap_or_else(|e| panic!("the browser run failed:\n{e}"));
        assert_eq!(result["statuses"], json!([200, 422, 200, 200]), "{result}");
        assert_eq!(
            result["password_inputs_empty"], true,
            "the short key is not echoed back"
        );
        assert_eq!(
            result["kept_values"]["org_name"], hostile,
            "typed text survives the 422, intact"
        );
        for name in ["01-form.png", "02-invalid.png", "03-done.png", "04-connections.png"] {
            let file = screenshots.join(name);
            let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
            assert!(size > 1000, "screenshot {} kept ({size} bytes)", file.display());
        }

        // The client learns of it on its stream and the retried call runs.
        let id = elicitation["elicitationId"].as_str().expect("id");
        assert_eq!(stream.next_completion().await, id);
        let result = client.call("tools/call", json!({"name": "openai_models"})).await;
        assert_eq!(result["isError"], false, "{result}");
        assert_eq!(result["content"][0]["text"], "ok");
        assert!(
            !database
                .everything_stored()
                .await
                .windows(SECRET.len())
                .any(|w| w == SECRET.as_bytes()),
            "the key is stored encrypted only"
        );
        server.stop().await;
    }
);

/// MCP authorization end to end in a real browser: alice's MCP client holds a bearer token from the
/// identity provider; the link of its -32042 sends Chromium, not yet signed in to the pages, through
/// the provider's sign-in (OpenID Connect) and back to the connect page, then on to the third party
/// and back; the client's stream hears the completion and the retried call runs.
#[tokio::test]
async fn a_person_signs_in_to_the_pages_then_connects_in_chromium() {
    if !browser_available() {
        return;
    }
    let idp = FakeIdp::start(FakeIdpOptions::default()).await;
    idp.add_user(TestUser {
        sub: "alice".into(),
        name: "Alice Liddell".into(),
        email: "alice@acme.test".into(),
        groups: vec!["eng".into()],
    });
    idp.sign_in_as("alice");
    let fake = FakeProvider::start(FakeOptions::default()).await;
    let database = TestDatabase::new(Backend::Sqlite).await;
    let identity = format!(
        "[identity]\nmode = \"oauth\"\nissuer = \"{}\"\nscopes = [\"mcp\"]\nclient_id = \"gatehouse\"\nclient_secret = \"gatehouse-secret\"\n\n",
        idp.issuer()
    );
    let server = TestServer::start(
        &database,
        &(identity + &fake.configure(include_str!("fixtures/fake_hub.toml"))),
    )
    .await;
    idp.register_client(TestClient {
        id: "gatehouse".into(),
        secret: Some("gatehouse-secret".into()),
        redirect_uris: vec![format!("{}/login/callback", server.base())],
    });
    let token = idp.access_token("alice", &server.url, "mcp");
    let mut client = server.client().with_user("Authorization", &format!("Bearer {token}"));
    client.initialize().await;
    let mut stream = client.open_stream(None).await;
    let reply = client.request("tools/call", json!({"name": "me"})).await;
    assert_eq!(reply.body["error"]["code"], -32042, "{}", reply.body);
    let elicitation = &reply.body["error"]["data"]["elicitations"][0];
    let url = elicitation["url"].as_str().expect("url").to_owned();

    let screenshots = artifact_dir("sign-in-then-connect");
    let plan = json!({
        "screenshots": screenshots,
        "steps": [
            {
                "goto": url,
                "expect_url_prefix": url,
                "expect_status": 200,
                "expect_heading": "Connect your Fake Hub account",
                "screenshot": "01-connect-after-sign-in.png",
            },
            {
                "click": "button[name=action][value=continue]",
                "expect_url_prefix": format!("{}/oauth/callback", server.base()),
                "expect_status": 200,
                "expect_heading": "Connected",
                "screenshot": "02-connected.png",
            },
            {
                "goto": format!("{}/connections", server.base()),
                "expect_status": 200,
                "expect_text": ["Alice Liddell", "Fake Hub", "Sign out"],
                "absent_text": [token.as_str()],
                "screenshot": "03-connections.png",
            },
        ],
    });
    let outcome = tokio::task::spawn_blocking(move || walk(&plan)).await.expect("join");
    let result = outcome.unwrap_or_else(|e| panic!("the browser run failed:\n{e}"));
    assert_eq!(result["steps"].as_array().map(Vec::len), Some(3), "{result}");
    assert_eq!(
        idp.stats().authorizations,
        1,
        "the pages signed in once, at the identity provider"
    );

    let id = elicitation["elicitationId"].as_str().expect("id");
    assert_eq!(stream.next_completion().await, id);
    let result = client.call("tools/call", json!({"name": "me"})).await;
    assert_eq!(result["isError"], false, "{result}");
    server.stop().await;
}
