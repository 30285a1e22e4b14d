//! Groups behind a proxy: deploy/Caddyfile.forward-auth on both Caddy releases (Debian's 2.6.2 and
//! the current one, the same file), its `forward_auth` asking a stand-in for oauth2-proxy's
//! `/oauth2/auth` on loopback (202 with X-Auth-Request-User and X-Auth-Request-Groups for a known
//! session cookie or bearer token, 401 otherwise), in front of two replicas in header identity
//! mode with `identity.groups_header`. A user in `ops` opens `/admin` and one in `eng` sees and
//! calls the tool for `eng`; users outside those groups are refused, also when they send the
//! group (or another user) in the headers themselves, which Caddy drops. A browser without a
//! session is sent to the service's sign-in page, and an MCP client without credentials gets the
//! service's 401, reaching no replica. Without a Caddy the tests skip loudly (and fail under
//! `CI=true`).

mod common;

use std::net::SocketAddr;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use common::caddy::{Caddy, CaddyRelease, adapt, validate};
use common::deploy_files::{deploy_file, substitute};
use common::deployment::{BEHIND_A_PROXY, Deployment, Layout};
use common::{Browser, McpClient, upstream};
use serde_json::json;

/// The stand-in's sessions: the token (the `_oauth2_proxy` cookie's value, or a bearer token),
/// the user it signs in, and their groups as oauth2-proxy sends them (none: no header).
const SESSIONS: [(&str, &str, Option<&str>); 3] = [
    ("alice-session", "alice", Some("eng")),
    ("bob-session", "bob", Some("eng,ops")),
    ("carol-session", "carol", None),
];

/// The session token a request to `/oauth2/auth` carries, if any: the cookie a browser has, or the
/// bearer token an MCP client sends.
fn session_of(headers: &HeaderMap) -> Option<&str> {
    let cookie = headers
        .get_all("cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix("_oauth2_proxy="));
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    cookie.or(bearer)
}

/// oauth2-proxy's `/oauth2/auth` with `--set-xauthrequest`, for [`SESSIONS`].
async fn check(headers: HeaderMap) -> Response {
    let Some((_, user, groups)) = SESSIONS.iter().find(|(token, ..)| Some(*token) == session_of(&headers)) else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let mut answer = StatusCode::ACCEPTED.into_response();
    let set = answer.headers_mut();
    set.insert("x-auth-request-user", HeaderValue::from_static(user));
    if let Some(groups) = groups {
        set.insert("x-auth-request-groups", HeaderValue::from_static(groups));
    }
    answer
}

/// The authentication service on loopback: `/oauth2/auth`, a sign-in page, and `/ok`, the tool's
/// upstream.
async fn auth_service() -> SocketAddr {
    let app = Router::new()
        .route("/oauth2/auth", get(check))
        .route(
            "/oauth2/sign_in",
            get(async || "the authentication service's sign-in page"),
        )
        .route("/ok", get(async || axum::Json(json!({"ok": true}))));
    upstream::serve(app).await
}

/// The replicas' configuration: the groups header, `/admin` for `ops`, a tool for `eng`.
fn config(service: SocketAddr) -> String {
    let identity = BEHIND_A_PROXY.replacen(
        "[identity]\n",
        "[identity]\ngroups_header = \"X-Forwarded-Groups\"\n",
        1,
    );
    format!(
        r#"{identity}
[admin]
allow = {{ groups = ["ops"] }}

[[tools]]
name = "for_eng"
description = "For engineers"
allow = {{ groups = ["eng"] }}
http = {{ url = "http://{service}/ok" }}
"#
    )
}

/// deploy/Caddyfile.forward-auth made runnable here: [`adapt`]'s substitutions, and the service
/// at `service` instead of `oauth2-proxy:4180`.
fn adapt_forward_auth(port: u16, upstreams: &[&str], service: SocketAddr) -> String {
    substitute(
        "Caddyfile",
        "tests/forward_auth.rs",
        &adapt(&deploy_file("Caddyfile.forward-auth"), port, upstreams),
        &[
            (
                "reverse_proxy oauth2-proxy:4180\n",
                format!("reverse_proxy {service}\n"),
            ),
            ("forward_auth oauth2-proxy:4180 {", format!("forward_auth {service} {{")),
        ],
    )
}

/// An MCP client through the deployment with bearer token `token` and the `forged` headers,
/// initialized.
async fn client_of(deployment: &Deployment, token: &str, forged: &[(&str, &str)]) -> McpClient {
    let mut client = McpClient::new(&deployment.mcp()).with_user("authorization", &format!("Bearer {token}"));
    for (name, value) in forged {
        client = client.with_header(name, value);
    }
    client.initialize().await;
    client
}

/// Whether the user of bearer token `token`, sending `forged` headers besides, sees and may call
/// `for_eng` through the deployment (listed and callable always agree).
async fn may_use_the_eng_tool(deployment: &Deployment, token: &str, forged: &[(&str, &str)]) -> bool {
    let client = client_of(deployment, token, forged).await;
    let listed = client.call("tools/list", json!({})).await["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .any(|tool| tool["name"] == "for_eng");
    let called = client
        .request("tools/call", json!({"name": "for_eng", "arguments": {}}))
        .await;
    assert_eq!(listed, called.body.get("result").is_some(), "{token}: {}", called.body);
    listed
}

/// The user of bearer token `token`, whatever they claim in `forged`, as gatehouse sees them.
async fn principal(deployment: &Deployment, token: &str, forged: &[(&str, &str)]) -> String {
    let whoami = client_of(deployment, token, forged)
        .await
        .call("tools/call", json!({"name": "whoami", "arguments": {}}))
        .await;
    whoami["structuredContent"]["principal"]
        .as_str()
        .expect("principal")
        .to_owned()
}

/// The whole check on `caddy`.
async fn groups_reach_what_they_may(caddy: CaddyRelease) {
    let Some(binary) = caddy.binary().await else {
        return;
    };
    let service = auth_service().await;
    let deployment = Deployment::start(Layout::Root, &config(service), &[], async |port, upstreams| {
        Caddy::start(&binary, &adapt_forward_auth(port, &upstreams, service), port).await
    })
    .await;
    let base = &deployment.base;
    let admin = format!("{base}/admin");
    let claims_ops = [("X-Forwarded-Groups", "ops"), ("X-Forwarded-User", "bob")];

    let bob = Browser::new().with_cookie("_oauth2_proxy", "bob-session");
    let page = bob.get(&admin).await;
    assert_eq!(page.status, StatusCode::OK, "{caddy:?}: {}", page.body);
    assert!(page.body.contains("Operator: bob"), "{}", page.body);
    for token in ["alice-session", "carol-session"] {
        let mut browser = Browser::new().with_cookie("_oauth2_proxy", token);
        assert_eq!(
            browser.get(&admin).await.status,
            StatusCode::FORBIDDEN,
            "{caddy:?} {token}"
        );
        for (name, value) in claims_ops {
            browser = browser.with_header(name, value);
        }
        let page = browser.get(&admin).await;
        assert_eq!(
            page.status,
            StatusCode::FORBIDDEN,
            "{caddy:?} {token} claiming ops: {}",
            page.body
        );
    }

    assert!(
        may_use_the_eng_tool(&deployment, "alice-session", &[]).await,
        "{caddy:?}"
    );
    assert!(
        !may_use_the_eng_tool(&deployment, "carol-session", &[]).await,
        "{caddy:?}"
    );
    let claims_eng = [("X-Forwarded-Groups", "eng"), ("X-Forwarded-User", "alice")];
    assert!(
        !may_use_the_eng_tool(&deployment, "carol-session", &claims_eng).await,
        "{caddy:?}"
    );
    assert_eq!(principal(&deployment, "carol-session", &claims_eng).await, "carol");

    let before = deployment.answered().await;
    let anonymous = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    for token in [None, Some("Bearer not-a-session")] {
        let mut request = anonymous
            .post(deployment.mcp())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("x-forwarded-user", "bob")
            .header("x-forwarded-groups", "ops")
            .body(initialize.to_string());
        if let Some(token) = token {
            request = request.header("authorization", token);
        }
        let refused = request.send().await.expect("/mcp");
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED, "{caddy:?} {token:?}");
    }
    let sent_to_sign_in = anonymous
        .get(format!("{base}/connections"))
        .send()
        .await
        .expect("/connections");
    assert_eq!(sent_to_sign_in.status(), StatusCode::FOUND, "{caddy:?}");
    let location = sent_to_sign_in.headers()["location"].to_str().expect("location");
    assert_eq!(location, "/oauth2/sign_in?rd=/connections");
    let sign_in = anonymous
        .get(format!("{base}{location}"))
        .send()
        .await
        .expect("sign-in page");
    assert_eq!(sign_in.status(), StatusCode::OK);
    assert_eq!(
        sign_in.text().await.expect("text"),
        "the authentication service's sign-in page"
    );
    assert_eq!(
        deployment.answered().await,
        before,
        "{caddy:?}: refused requests reach no replica"
    );
}

postgres_test!(
    async fn groups_reach_what_they_may_through_debians_caddy() {
        groups_reach_what_they_may(CaddyRelease::Debian).await;
    }
);

postgres_test!(
    async fn groups_reach_what_they_may_through_the_current_caddy() {
        groups_reach_what_they_may(CaddyRelease::Current).await;
    }
);

/// The file is valid for both Caddys as it is, and its substitutions match even without one.
#[tokio::test]
async fn the_forward_auth_caddyfile_is_valid_for_both_caddys() {
    let service: SocketAddr = "127.0.0.1:1".parse().expect("address");
    let adapted = adapt_forward_auth(18080, &["127.0.0.1:2", "127.0.0.1:3"], service);
    for expected in [
        "forward_auth 127.0.0.1:1 {",
        "copy_headers X-Auth-Request-User>X-Forwarded-User X-Auth-Request-Groups>X-Forwarded-Groups",
        "request_header -X-Forwarded-User\n\t\t\trequest_header -X-Forwarded-Groups\n",
    ] {
        assert!(adapted.contains(expected), "{expected:?} in:\n{adapted}");
    }
    for caddy in CaddyRelease::BOTH {
        let Some(binary) = caddy.binary().await else {
            continue;
        };
        if let Err(why) = validate(&binary, &deploy_file("Caddyfile.forward-auth")) {
            panic!("deploy/Caddyfile.forward-auth on {caddy:?}: {why}");
        }
    }
}
