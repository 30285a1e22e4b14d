//! Claude Code 2.1.332, the client whose `-p` mode answers every URL elicitation `cancel`, driven
//! headless against gatehouse (tests/common/claude_code.rs): a call gated by a sign-in ends with the
//! link in its result, and once the user finished there, the same call made again in the same
//! Claude Code process runs the tool.

mod common;

use common::claude_code::{ClaudeCode, claude_code};
use common::fake_oauth::{FakeOptions, FakeProvider};
use common::{Backend, Browser, TestDatabase, TestServer};
use reqwest::StatusCode;
use serde_json::json;

backend_test!(
    /// Claude Code is handed the sign-in link as a URL-mode elicitation and the harness dismisses
    /// it (`cancel`, "not now", what `-p` mode answers): the call ends with an error result naming
    /// that link under gatehouse's public URL and asking to call again, not one saying the user
    /// declined. The user signs in there; the call made again in the same process runs the tool.
    async fn claude_code_gets_the_link_of_a_gated_call_and_its_retry_runs_the_tool(backend: Backend) {
        let Some(binary) = claude_code().await else {
            return;
        };
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start(&database, &fake.configure(include_str!("fixtures/fake_hub.toml"))).await;
        let mut claude = ClaudeCode::start(&binary, &server.url).await;

        // A result that is an error comes back as the control response's `error`, its text.
        let linked = claude.call("me", json!({})).await;
        assert_eq!(linked["subtype"], "error", "{linked}\nseen: {:?}", claude.seen);
        let text = linked["error"].as_str().unwrap_or_default();
        assert!(
            text.contains("call this tool again") && !text.contains("declined"),
            "{text}"
        );
        let connect = format!("{}/connect/", server.base());
        let url = text
            .split_whitespace()
            .find(|word| word.starts_with(&connect))
            .unwrap_or_else(|| panic!("a link under {connect} in {text}"));
        // It was handed the link as a URL-mode elicitation, answered `cancel` (as `-p` mode does).
        let asked: Vec<&str> = claude
            .elicitations
            .iter()
            .filter_map(|e| e["request"]["url"].as_str())
            .collect();
        assert_eq!(asked, [url], "{:?}", claude.elicitations);
        let page = Browser::new().sign_in(url).await;
        assert_eq!(page.status, StatusCode::OK, "callback page: {}", page.body);

        let ran = claude.call("me", json!({})).await;
        assert_eq!(ran["subtype"], "success", "{ran}\nseen: {:?}", claude.seen);
        assert_ne!(ran["response"]["isError"], true, "{ran}");
        assert_eq!(ran["response"]["structuredContent"]["login"], "octocat", "{ran}");
        assert_eq!(
            claude.elicitations.len(),
            1,
            "the retry asked nothing: {:?}",
            claude.elicitations
        );
        drop(claude);
        server.stop().await;
    }
);
