//! Behind Debian's nginx as deploy/nginx/ configures it: gatehouse.conf (gatehouse is the whole
//! site) and gatehouse-prefixed.conf (under /gatehouse/, which proxy_pass's trailing slash
//! strips), adapted to this machine (tests/common/nginx.rs), in front of two replicas on
//! PostgreSQL in header identity mode (tests/common/deployment.rs). The official Python SDK signs
//! in through either with basic auth (-32042, the browser through nginx to the provider and back,
//! the completion notification, the retry; both replicas answer; under the prefix every URL and
//! cookie path carries it), a forged identity header is replaced and nginx itself asks for
//! credentials, and a session's GET stream stays open through 80 s of silence (longer than nginx's
//! default `proxy_read_timeout` of 60 s and the 75 s where many proxies cut) and still delivers.
//! Without nginx the tests skip loudly (and fail under `CI=true`).

mod common;

use std::time::{Duration, Instant};

use common::deployment::{BEHIND_A_PROXY, Deployment, Layout, demo};
use common::nginx::{Nginx, adapt, deploy_conf, nginx_binary};
use common::python::python_sdk;
use common::{WAIT, elicitations, url_of};
use reqwest::StatusCode;
use serde_json::json;

/// The configuration file of `layout`.
fn conf_name(layout: Layout) -> &'static str {
    match layout {
        Layout::Root => "gatehouse.conf",
        Layout::Prefixed => "gatehouse-prefixed.conf",
    }
}

/// nginx with `layout`'s file in front of the replicas, `env` added to theirs, or None when there
/// is no nginx (after a loud skip).
async fn deploy(layout: Layout, env: &[(&str, &str)]) -> Option<Deployment> {
    let nginx = nginx_binary()?;
    let conf = deploy_conf(conf_name(layout));
    let deployment = Deployment::start(layout, BEHIND_A_PROXY, env, async |port, upstreams| {
        Nginx::start(&nginx, &conf, port, upstreams).await
    })
    .await;
    Some(deployment)
}

/// The official Python SDK signs in through nginx laid out as `layout`.
async fn the_python_sdk_signs_in(layout: Layout) -> Option<Deployment> {
    let python = python_sdk().await?;
    let deployment = deploy(layout, &[]).await?;
    deployment
        .an_sdk_signs_in(&python, "tests/interop/python_elicitation.py", &[])
        .await;
    Some(deployment)
}

postgres_test!(
    async fn the_python_sdk_signs_in_through_nginx() {
        the_python_sdk_signs_in(Layout::Root).await;
    }
);

postgres_test!(
    /// Under /gatehouse/: the sign-in's URLs and cookie paths carry the prefix; the bare prefix
    /// redirects to the landing page, which names the prefixed endpoint; `/mcp` at the site's root
    /// is not gatehouse's (nginx's 404, reaching no replica).
    async fn the_python_sdk_signs_in_through_nginx_under_a_prefix() {
        let Some(deployment) = the_python_sdk_signs_in(Layout::Prefixed).await else {
            return;
        };
        let base = &deployment.base;
        let browser = deployment.browser();
        let bare = browser.get(&format!("{base}/gatehouse")).await;
        assert_eq!(bare.status, StatusCode::PERMANENT_REDIRECT, "{}", bare.body);
        // nginx makes the Location absolute (`absolute_redirect`, on by default).
        assert_eq!(bare.location(), format!("{base}/gatehouse/"));
        let landing = browser.get(&bare.location()).await;
        assert_eq!(landing.status, StatusCode::OK, "{}", landing.body);
        assert!(landing.body.contains(&deployment.mcp()), "{}", landing.body);

        let before = deployment.answered().await;
        let root = reqwest::Client::new()
            .get(format!("{base}/mcp"))
            .header("authorization", demo())
            .send()
            .await
            .expect("/mcp at the root");
        assert_eq!(root.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            deployment.answered().await,
            before,
            "/mcp at the root reaches no replica"
        );
    }
);

postgres_test!(
    /// nginx's `proxy_set_header X-Forwarded-User $remote_user` replaces what the client sent;
    /// without credentials, or with a wrong password, nginx answers 401 itself.
    async fn a_forged_identity_header_is_replaced_and_basic_auth_is_required_by_nginx() {
        if let Some(deployment) = deploy(Layout::Root, &[]).await {
            deployment
                .a_forged_identity_header_is_replaced_and_sign_in_is_required()
                .await;
        }
    }
);

/// How long the replicas wait between keep-alive comments in the stream test: longer than nginx's
/// default `proxy_read_timeout` (60 s) and the 75 s at which many proxies and load balancers cut
/// an idle connection.
const SILENCE: &str = "80s";
/// What the stream test must see its stream outlive.
const PAST: Duration = Duration::from_secs(75);

postgres_test!(
    /// A session's GET stream through nginx, with the replicas' `server.sse_keep_alive` at 80 s:
    /// after the priming event nothing comes for 80 s, which nginx passes through (its
    /// `proxy_read_timeout 3600s`); the keep-alive comment arrives after the 75 s mark, and the
    /// stream still delivers: a sign-in completed then reaches it as its completion notification.
    async fn a_stream_through_nginx_stays_open_past_75_seconds() {
        let env = [("GATEHOUSE_SERVER__SSE_KEEP_ALIVE", SILENCE)];
        let Some(deployment) = deploy(Layout::Root, &env).await else {
            return;
        };
        let client = deployment.client().await;
        let mut stream = client.open_stream(None).await;
        let opened = Instant::now();
        let priming = stream.next_block(WAIT).await.expect("the priming event");
        assert!(priming.starts_with("id:"), "{priming:?}");

        let keep_alive = stream
            .next_block(Duration::from_secs(120))
            .await
            .unwrap_or_else(|| panic!("the stream ended or went silent at {:?}", opened.elapsed()));
        let silent_for = opened.elapsed();
        assert!(
            keep_alive.lines().all(|line| line.is_empty() || line.starts_with(':')),
            "a keep-alive comment: {keep_alive:?}"
        );
        assert!(silent_for > PAST, "the keep-alive came after {silent_for:?}");

        let reply = client
            .request("tools/call", json!({"name": "me", "arguments": {}}))
            .await;
        let elicitation = elicitations(&reply).remove(0);
        deployment.sign_in(&url_of(&elicitation)).await;
        let completed = stream.next_completion().await;
        assert_eq!(completed, elicitation["elicitationId"].as_str().expect("id"));
        let delivered_at = opened.elapsed();
        assert!(delivered_at > PAST, "{delivered_at:?}");
        eprintln!("the stream through nginx: keep-alive after {silent_for:?}, completion after {delivered_at:?}");
    }
);

/// The substitutions match both of the repository's files even on a machine without nginx.
#[test]
fn the_deploy_nginx_configurations_adapt() {
    for layout in [Layout::Root, Layout::Prefixed] {
        let htpasswd = std::path::Path::new("/tmp/x/gatehouse.htpasswd");
        let adapted = adapt(
            &deploy_conf(conf_name(layout)),
            18080,
            ["127.0.0.1:1", "127.0.0.1:2"],
            htpasswd,
        );
        for expected in [
            "    listen 127.0.0.1:18080;\n",
            "    server 127.0.0.1:1 max_fails=3 fail_timeout=5s;\n    server 127.0.0.1:2 max_fails=3",
            "auth_basic_user_file /tmp/x/gatehouse.htpasswd;\n",
            "proxy_buffering off;\n",
            "proxy_read_timeout 3600s;\n",
            "proxy_set_header Connection \"\";\n",
            "proxy_set_header X-Forwarded-User $remote_user;\n",
        ] {
            assert!(adapted.contains(expected), "{layout:?}: {expected:?} in:\n{adapted}");
        }
    }
}

/// A configuration the substitutions no longer fit is refused, not half adapted.
#[test]
#[should_panic(expected = "the nginx configuration changed")]
fn an_nginx_configuration_the_substitutions_do_not_fit_is_refused() {
    adapt(
        &deploy_conf("gatehouse.conf").replace("listen 8080;", "listen 9090;"),
        18080,
        ["127.0.0.1:1", "127.0.0.1:2"],
        std::path::Path::new("/tmp/x"),
    );
}

/// `nginx -t` accepts both files, adapted, in the tests' main configuration.
#[test]
fn nginx_accepts_both_configurations() {
    let Some(nginx) = nginx_binary() else {
        return;
    };
    for layout in [Layout::Root, Layout::Prefixed] {
        if let Err(why) = Nginx::check(&nginx, &deploy_conf(conf_name(layout))) {
            panic!("deploy/nginx/{}: {why}", conf_name(layout));
        }
    }
}
