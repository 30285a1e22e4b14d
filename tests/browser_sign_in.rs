//! The pages' own sign-in in `oauth` mode, against a real (fake) identity provider on loopback:
//! the whole redirect dance (page, /login, the provider's authorize, /login/callback, the page
//! again) into a browser session bound to the same principal as the user's bearer token; another
//! user's elicitation refused naming who is signed in; forged, missing and refused answers leaving
//! no session; sign-out; expiry; key rotation; and a session made on one replica used on another.

mod common;

use std::collections::HashMap;

use common::fake_idp::{ClaimsTamper, FakeIdp, FakeIdpOptions, TestClient, TestUser};
use common::fake_oauth::{FakeOptions, FakeProvider};
use common::{Backend, Browser, McpClient, Page, TestDatabase, TestServer, elicitations, unescape, url_of};
use reqwest::StatusCode;
use serde_json::json;

const CLIENT_ID: &str = "gatehouse";
const CLIENT_SECRET: &str = "gatehouse-secret";
/// What the pages call alice (`user("alice")`'s name).
const ALICE_NAME: &str = "alice Example";

fn user(sub: &str) -> TestUser {
    TestUser {
        sub: sub.to_owned(),
        name: format!("{sub} Example"),
        email: format!("{sub}@acme.test"),
        groups: vec!["eng".to_owned()],
    }
}

async fn idp() -> FakeIdp {
    let idp = FakeIdp::start(FakeIdpOptions::default()).await;
    idp.add_user(user("alice"));
    idp.add_user(user("mallory"));
    idp
}

/// gatehouse in `oauth` mode at `idp`, with a tool that needs a form (so calling it makes an
/// elicitation); its callback registered with the provider. `extra` goes into `[identity]`.
async fn server(database: &TestDatabase, idp: &FakeIdp, extra: &str) -> TestServer {
    server_with(database, idp, extra, "").await
}

/// [`server`] with more configuration (providers, tools) after its own.
async fn server_with(database: &TestDatabase, idp: &FakeIdp, extra: &str, more: &str) -> TestServer {
    let issuer = idp.issuer();
    let server = TestServer::start_addressed(database, |addr| {
        format!(
            r#"
[identity]
mode = "oauth"
issuer = "{issuer}"
scopes = ["mcp"]
client_id = "{CLIENT_ID}"
client_secret = "{CLIENT_SECRET}"
{extra}

[[forms]]
id = "note"
title = "A note"
[[forms.fields]]
name = "text"
label = "Note"
type = "text"
required = true

[[tools]]
name = "noted"
description = "Needs a note"
requires = ["form:note"]
http = {{ method = "GET", url = "http://{addr}/healthz" }}

{more}
"#
        )
    })
    .await;
    register(idp, &[&server]);
    server
}

/// The pages' client at the provider, with the callback of each of `servers`.
fn register(idp: &FakeIdp, servers: &[&TestServer]) {
    idp.register_client(TestClient {
        id: CLIENT_ID.to_owned(),
        secret: Some(CLIENT_SECRET.to_owned()),
        redirect_uris: servers
            .iter()
            .map(|server| format!("{}/login/callback", server.base()))
            .collect(),
    });
}

/// Alice calls the tool with her bearer token: the URL of the elicitation it makes.
async fn alice_elicitation(server: &TestServer, idp: &FakeIdp) -> String {
    let reply = alice(server, idp)
        .await
        .request("tools/call", json!({"name": "noted"}))
        .await;
    url_of(&elicitations(&reply)[0])
}

/// Alice's MCP client, initialized, with her bearer token.
async fn alice(server: &TestServer, idp: &FakeIdp) -> McpClient {
    let token = idp.access_token("alice", &server.url, "mcp");
    let mut client = server.client().with_user("Authorization", &format!("Bearer {token}"));
    client.initialize().await;
    client
}

/// The `Set-Cookie` of `page` whose cookie's name starts with `prefix`.
fn set_cookie(page: &Page, prefix: &str) -> String {
    page.headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix}… cookie set: {:?}", page.headers))
        .to_owned()
}

/// `/login?next=path`, then the provider's authorize (as whoever is signed in there): the URL it
/// sends the browser back to, and the authorization request's parameters.
async fn to_provider_and_back(
    browser: &Browser,
    server: &TestServer,
    idp: &FakeIdp,
    path: &str,
) -> (String, HashMap<String, String>) {
    let base = server.base();
    let next: String = url::form_urlencoded::byte_serialize(path.as_bytes()).collect();
    let to_provider = browser.get(&format!("{base}/login?next={next}")).await;
    assert_eq!(to_provider.status, StatusCode::FOUND, "{}", to_provider.body);
    let authorize = url::Url::parse(&to_provider.location()).expect("authorize URL");
    assert!(authorize.as_str().starts_with(&idp.issuer()), "{authorize}");
    let flow_cookie = set_cookie(&to_provider, "gatehouse-login-");
    assert!(
        flow_cookie.ends_with("; Path=/; HttpOnly; SameSite=Lax; Max-Age=600"),
        "{flow_cookie}"
    );
    let back = browser.get(authorize.as_str()).await;
    assert_eq!(back.status, StatusCode::FOUND, "{}", back.body);
    let callback = back.location();
    assert!(callback.starts_with(&format!("{base}/login/callback?")), "{callback}");
    (callback, authorize.query_pairs().into_owned().collect())
}

/// Opens `url`, which sends the browser to sign in, and follows every redirect by hand: /login,
/// the provider's authorize (as whoever is signed in there), /login/callback, back to `url`.
/// Returns the page `url` shows then.
async fn sign_in_through(browser: &Browser, server: &TestServer, idp: &FakeIdp, url: &str) -> Page {
    let base = server.base();
    let first = browser.get(url).await;
    assert_eq!(first.status, StatusCode::SEE_OTHER, "{}", first.body);
    let path = url.strip_prefix(&base).expect("a page of this server");
    let next: String = url::form_urlencoded::byte_serialize(path.as_bytes()).collect();
    assert_eq!(first.location(), format!("/login?next={next}"));

    let (callback, request) = to_provider_and_back(browser, server, idp, path).await;
    assert_eq!(request["response_type"], "code");
    assert_eq!(request["client_id"], CLIENT_ID);
    assert_eq!(request["code_challenge_method"], "S256");
    assert_eq!(request["redirect_uri"], format!("{base}/login/callback"));
    assert_eq!(request["scope"], "openid profile email");
    assert!(
        request["state"].len() >= 43 && request["nonce"].len() >= 43,
        "{request:?}"
    );

    let done = browser.get(&callback).await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(done.location(), path);
    let session = set_cookie(&done, "gatehouse-session=");
    assert!(
        session.ends_with("; Path=/; HttpOnly; SameSite=Lax; Max-Age=43200"),
        "http, so no __Host- prefix and no Secure: {session}"
    );
    browser.get(url).await
}

async fn browser_sessions(database: &TestDatabase) -> i64 {
    database.query_count("SELECT COUNT(*) FROM browser_sessions").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_signs_in_and_opens_its_users_elicitation_but_not_anothers() {
    let idp = idp().await;
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = server(&database, &idp, "").await;
    let base = server.base();
    let url = alice_elicitation(&server, &idp).await;

    idp.sign_in_as("alice");
    let alice = Browser::new();
    let page = sign_in_through(&alice, &server, &idp, &url).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("A note"), "{}", page.body);
    assert_eq!(browser_sessions(&database).await, 1);
    // A post works with the session: the form is answered, the elicitation complete.
    let done = alice
        .post_form(
            &url,
            &base,
            &[("csrf", &page.csrf()), ("text", "hello"), ("action", "submit")],
        )
        .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert_eq!(
        database
            .query_count("SELECT COUNT(*) FROM elicitations WHERE status = 'completed'")
            .await,
        1
    );

    // Mallory, signed in, opens a new elicitation of alice's (her answer forgotten, so the tool
    // asks again): refused, and told who they are.
    database.execute("DELETE FROM form_values").await;
    let url = alice_elicitation(&server, &idp).await;
    idp.sign_in_as("mallory");
    let mallory = Browser::new();
    let refused = sign_in_through(&mallory, &server, &idp, &url).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    let text = unescape(&refused.body);
    let principal = format!("{}#mallory", idp.issuer());
    assert!(
        text.contains(&format!("You are signed in as mallory Example ({principal})")),
        "{text}"
    );
    assert!(refused.body.contains("href=\"/logout\""), "{}", refused.body);
    assert_eq!(
        database
            .query_count("SELECT COUNT(*) FROM elicitations WHERE status = 'pending'")
            .await,
        1,
        "nothing changed"
    );
    let post = mallory
        .post_form(&url, &base, &[("csrf", "x"), ("text", "evil"), ("action", "submit")])
        .await;
    assert_eq!(post.status, StatusCode::FORBIDDEN);
    assert_eq!(browser_sessions(&database).await, 2);
    server.stop().await;
}

/// `callback` with its parameter `name` set to `value`.
fn with_param(callback: &str, name: &str, value: &str) -> String {
    let mut url = url::Url::parse(callback).expect("callback URL");
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .into_owned()
        .map(|(k, v)| if k == name { (k, value.to_owned()) } else { (k, v) })
        .collect();
    url.query_pairs_mut().clear().extend_pairs(pairs);
    url.to_string()
}

fn assert_refused(page: &Page, words: &str) {
    assert_eq!(page.status, StatusCode::BAD_REQUEST, "{}", page.body);
    assert!(unescape(&page.body).contains(words), "{}", page.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_missing_or_refused_answer_signs_nobody_in() {
    let idp = idp().await;
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = server(&database, &idp, "").await;
    let base = server.base();
    idp.sign_in_as("alice");
    let browser = Browser::new();

    let no_state = browser.get(&format!("{base}/login/callback?code=abc")).await;
    assert_refused(&no_state, "does not say which sign-in it is for");

    let (callback, _) = to_provider_and_back(&browser, &server, &idp, "/connections").await;
    let forged = browser.get(&with_param(&callback, "state", "forged")).await;
    assert_refused(&forged, "was not started in this browser");
    // The provider's real answer, pushed into another browser (login CSRF): no flow cookie there.
    let pushed = Browser::new().get(&callback).await;
    assert_refused(&pushed, "was not started in this browser");
    let (_, request) = to_provider_and_back(&browser, &server, &idp, "/connections").await;
    let denied = browser
        .get(&format!(
            "{base}/login/callback?error=access_denied&state={}",
            request["state"]
        ))
        .await;
    assert_refused(&denied, "did not let you sign in (access_denied)");
    assert!(
        denied.body.contains("href=\"/login?next=%2Fconnections\""),
        "{}",
        denied.body
    );

    let (mixed_up, _) = to_provider_and_back(&browser, &server, &idp, "/connections").await;
    let other_issuer = browser
        .get(&with_param(&mixed_up, "iss", "https://idp.evil.example"))
        .await;
    assert_refused(&other_issuer, "came from another identity provider");
    let (bad_code, _) = to_provider_and_back(&browser, &server, &idp, "/connections").await;
    let refused_code = browser.get(&with_param(&bad_code, "code", "made-up")).await;
    assert_refused(&refused_code, "did not prove who you are");
    assert_eq!(browser_sessions(&database).await, 0, "nothing stored");
    assert_eq!(
        browser.get(&format!("{base}/connections")).await.status,
        StatusCode::SEE_OTHER
    );

    // The first answer, untouched and in its own browser, still signs in.
    let signed_in = browser.get(&callback).await;
    assert_eq!(signed_in.status, StatusCode::SEE_OTHER, "{}", signed_in.body);
    assert_eq!(signed_in.location(), "/connections");
    assert_eq!(browser_sessions(&database).await, 1);
    server.stop().await;
}

/// A signing identity provider that lies in its id_token (another sign-in's nonce or none, another
/// client's audience or `azp`, two audiences without `azp`, another issuer, an expired token, no
/// subject): each is refused with a valid signature, and no session is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_token_that_lies_signs_nobody_in() {
    let idp = idp().await;
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = server(&database, &idp, "").await;
    idp.sign_in_as("alice");
    let lies: [(&str, ClaimsTamper); 8] = [
        ("another nonce", |c| c["nonce"] = json!("another-sign-in")),
        ("no nonce", |c| {
            c.as_object_mut().expect("claims").remove("nonce");
        }),
        ("another audience", |c| c["aud"] = json!("another-client")),
        ("two audiences, no azp", |c| {
            c["aud"] = json!([CLIENT_ID, "another-client"])
        }),
        ("another client's azp", |c| c["azp"] = json!("another-client")),
        ("another issuer", |c| c["iss"] = json!("https://idp.evil.example")),
        ("expired", |c| {
            let now = c["iat"].as_u64().expect("iat");
            c["iat"] = json!(now - 7200);
            c["exp"] = json!(now - 3600);
        }),
        ("no subject", |c| {
            c.as_object_mut().expect("claims").remove("sub");
        }),
    ];
    for (lie, tamper) in lies {
        idp.tamper_id_tokens(Some(tamper));
        let browser = Browser::new();
        let (callback, _) = to_provider_and_back(&browser, &server, &idp, "/connections").await;
        let answered = browser.get(&callback).await;
        assert_eq!(answered.status, StatusCode::BAD_REQUEST, "{lie}: {}", answered.body);
        assert!(
            unescape(&answered.body).contains("did not prove who you are"),
            "{lie}: {}",
            answered.body
        );
        assert_eq!(browser_sessions(&database).await, 0, "{lie}: nothing stored");
    }

    idp.tamper_id_tokens(None);
    let browser = Browser::new();
    let (callback, _) = to_provider_and_back(&browser, &server, &idp, "/connections").await;
    let signed_in = browser.get(&callback).await;
    assert_eq!(signed_in.status, StatusCode::SEE_OTHER, "{}", signed_in.body);
    assert_eq!(browser_sessions(&database).await, 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_out_or_expiring_ends_the_session() {
    let idp = idp().await;
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = server(&database, &idp, "").await;
    let base = server.base();
    let connections = format!("{base}/connections");
    idp.sign_in_as("alice");
    let browser = Browser::new();
    let page = sign_in_through(&browser, &server, &idp, &connections).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let principal = format!("{}#alice", idp.issuer());
    assert!(
        unescape(&page.body).contains(&format!("Signed in here as {ALICE_NAME} ({principal}).")),
        "{}",
        page.body
    );
    let cookie = browser.cookie_header();

    let confirm = browser.get(&format!("{base}/logout")).await;
    assert_eq!(confirm.status, StatusCode::OK, "{}", confirm.body);
    assert!(unescape(&confirm.body).contains(&format!("signed in here as alice Example ({principal})")));
    let forged = browser
        .post_form(&format!("{base}/logout"), &base, &[("csrf", "forged")])
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert_eq!(browser_sessions(&database).await, 1);
    let signed_out = browser
        .post_form(&format!("{base}/logout"), &base, &[("csrf", &confirm.csrf())])
        .await;
    assert_eq!(signed_out.status, StatusCode::OK, "{}", signed_out.body);
    assert!(signed_out.body.contains("Signed out"));
    assert!(set_cookie(&signed_out, "gatehouse-session=;").contains("Max-Age=0"));
    assert_eq!(browser_sessions(&database).await, 0);

    // The old cookie, sent again, is nobody's: a page sends it to sign in, a post is told to.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let replayed = http
        .get(&connections)
        .header("cookie", &cookie)
        .send()
        .await
        .expect("GET");
    assert_eq!(replayed.status(), StatusCode::SEE_OTHER);
    assert_eq!(replayed.headers()["location"], "/login?next=%2Fconnections");
    let post = http
        .post(&connections)
        .header("cookie", &cookie)
        .header("origin", &base)
        .form(&[("csrf", "x"), ("action", "disconnect"), ("provider", "github")])
        .send()
        .await
        .expect("POST");
    assert_eq!(post.status(), StatusCode::UNAUTHORIZED);
    assert!(
        post.text()
            .await
            .expect("body")
            .contains("href=\"/login?next=%2Fconnections\"")
    );

    // Signed in again, then past the session's expiry: sent to sign in.
    let browser = Browser::new();
    assert_eq!(
        sign_in_through(&browser, &server, &idp, &connections).await.status,
        StatusCode::OK
    );
    database.execute("UPDATE browser_sessions SET expires_at = 1").await;
    let expired = browser.get(&connections).await;
    assert_eq!(expired.status, StatusCode::SEE_OTHER);
    assert_eq!(expired.location(), "/login?next=%2Fconnections");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_in_browser_connects_an_account_through_the_providers_callback() {
    let idp = idp().await;
    idp.sign_in_as("alice");
    let fake = FakeProvider::start(FakeOptions::default()).await;
    let more = fake.configure(include_str!("fixtures/fake_provider.toml"));
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = server_with(&database, &idp, "", &more).await;
    let client = alice(&server, &idp).await;
    let url = url_of(&elicitations(&client.request("tools/call", json!({"name": "me"})).await)[0]);

    let browser = Browser::new();
    let page = sign_in_through(&browser, &server, &idp, &url).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    // Continue, the provider, and its top-level redirect back to /oauth/callback, which carries
    // the session cookie (SameSite=Lax) and so knows the browser is alice's.
    let authorize = browser.continue_to_provider(&url).await;
    let callback = browser.authorize(&authorize).await;
    let connected = browser.get(&callback).await;
    assert_eq!(connected.status, StatusCode::OK, "{}", connected.body);
    assert!(connected.body.contains("is connected"), "{}", connected.body);
    let result = client.call("tools/call", json!({"name": "me"})).await;
    assert_eq!(result["isError"], false, "{result}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_oauth_mode_the_pages_do_not_sign_in() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start(&database, common::HEADER_IDENTITY).await;
    for path in ["/login?next=/connections", "/logout"] {
        let page = Browser::as_user("x-forwarded-user", "alice")
            .get(&format!("{}{path}", server.base()))
            .await;
        assert_eq!(page.status, StatusCode::NOT_FOUND, "{path}");
        assert!(
            page.body.contains("the sign-in service in front of it"),
            "{}",
            page.body
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_token_under_a_new_key_refetches_the_keys_at_most_once_per_interval() {
    let idp = idp().await;
    idp.sign_in_as("alice");
    let database = TestDatabase::new(Backend::Sqlite).await;
    let eager = server(&database, &idp, "jwks_refresh_interval = \"0s\"").await;
    let connections = format!("{}/connections", eager.base());
    let page = sign_in_through(&Browser::new(), &eager, &idp, &connections).await;
    assert_eq!(page.status, StatusCode::OK);
    let fetches = idp.stats().jwks_fetches;
    idp.rotate_keys(false);
    let page = sign_in_through(&Browser::new(), &eager, &idp, &connections).await;
    assert_eq!(page.status, StatusCode::OK, "the new key was fetched: {}", page.body);
    assert_eq!(idp.stats().jwks_fetches, fetches + 1);
    eager.stop().await;

    // With the default interval, keys fetched a moment ago are not fetched again.
    let database = TestDatabase::new(Backend::Sqlite).await;
    let patient = server(&database, &idp, "").await;
    let connections = format!("{}/connections", patient.base());
    assert_eq!(
        sign_in_through(&Browser::new(), &patient, &idp, &connections)
            .await
            .status,
        StatusCode::OK
    );
    let fetches = idp.stats().jwks_fetches;
    idp.rotate_keys(false);
    let browser = Browser::new();
    let (callback, _) = to_provider_and_back(&browser, &patient, &idp, "/connections").await;
    assert_refused(&browser.get(&callback).await, "did not prove who you are");
    assert_eq!(idp.stats().jwks_fetches, fetches);
    assert_eq!(browser_sessions(&database).await, 1);
    patient.stop().await;
}

postgres_test!(
    /// A session made through one replica is known to another (they share the database), and
    /// signing out on one ends it on both.
    async fn a_session_made_on_one_replica_works_on_another() {
        let idp = idp().await;
        idp.sign_in_as("alice");
        let database = TestDatabase::new(Backend::Postgres).await;
        let a = server(&database, &idp, "").await;
        let b = server(&database, &idp, "").await;
        register(&idp, &[&a, &b]);
        let browser = Browser::new();
        let on_a = sign_in_through(&browser, &a, &idp, &format!("{}/connections", a.base())).await;
        assert_eq!(on_a.status, StatusCode::OK, "{}", on_a.body);
        let on_b = browser.get(&format!("{}/connections", b.base())).await;
        assert_eq!(on_b.status, StatusCode::OK, "{}", on_b.body);
        let principal = format!("{}#alice", idp.issuer());
        assert!(unescape(&on_b.body).contains(&format!("Signed in here as {ALICE_NAME} ({principal}).")));

        let confirm = browser.get(&format!("{}/logout", b.base())).await;
        let signed_out = browser
            .post_form(&format!("{}/logout", b.base()), &b.base(), &[("csrf", &confirm.csrf())])
            .await;
        assert_eq!(signed_out.status, StatusCode::OK, "{}", signed_out.body);
        assert_eq!(browser_sessions(&database).await, 0);
        a.stop().await;
        b.stop().await;
    }
);
