//! `[admin] allow` in `oauth` mode reads the claims of the pages' own sign-in (the id_token's
//! groups): a browser not signed in is sent to sign in and comes back to the page; olga (group
//! `ops`) is let in, alice (group `eng`) gets 403.

use common::fake_idp::{FakeIdp, FakeIdpOptions, TestClient, TestUser};

use super::*;

const CLIENT_ID: &str = "gatehouse";
const CLIENT_SECRET: &str = "gatehouse-secret";

fn user(sub: &str, group: &str) -> TestUser {
    TestUser {
        sub: sub.to_owned(),
        name: format!("{sub} Example"),
        email: format!("{sub}@acme.test"),
        groups: vec![group.to_owned()],
    }
}

/// Opens `path`, is sent to sign in, and follows every redirect by hand (/login, the provider's
/// authorize as whoever is signed in there, /login/callback, back to `path`); the page then.
async fn signed_in(browser: &Browser, server: &TestServer, path: &str) -> common::Page {
    let base = server.base();
    let first = browser.get(&format!("{base}{path}")).await;
    assert_eq!(first.status, StatusCode::SEE_OTHER, "{}", first.body);
    let login = browser.get(&format!("{base}{}", first.location())).await;
    assert_eq!(login.status, StatusCode::FOUND, "{}", login.body);
    let back = browser.get(&login.location()).await;
    assert_eq!(back.status, StatusCode::FOUND, "{}", back.body);
    let done = browser.get(&back.location()).await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(done.location(), path);
    browser.get(&format!("{base}{path}")).await
}

backend_test!(
    async fn operators_are_named_by_the_sign_in_s_claims(backend: Backend) {
        let idp = FakeIdp::start(FakeIdpOptions::default()).await;
        idp.add_user(user("alice", "eng"));
        idp.add_user(user("olga", "ops"));
        let database = TestDatabase::new(backend).await;
        let issuer = idp.issuer();
        let server = TestServer::start(
            &database,
            &format!(
                "[identity]\nmode = \"oauth\"\nissuer = \"{issuer}\"\nscopes = [\"mcp\"]\n\
                 client_id = \"{CLIENT_ID}\"\nclient_secret = \"{CLIENT_SECRET}\"\n\
                 [admin]\nallow = {{ groups = [\"ops\"] }}\n"
            ),
        )
        .await;
        idp.register_client(TestClient {
            id: CLIENT_ID.to_owned(),
            secret: Some(CLIENT_SECRET.to_owned()),
            redirect_uris: vec![format!("{}/login/callback", server.base())],
        });

        idp.sign_in_as("olga");
        let olga = Browser::new();
        let page = signed_in(&olga, &server, "/admin/audit").await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.body.contains("Operator: olga Example"), "{}", page.body);

        idp.sign_in_as("alice");
        let alice = Browser::new();
        let page = signed_in(&alice, &server, "/admin/users").await;
        assert_eq!(page.status, StatusCode::FORBIDDEN, "{}", page.body);
        let posted = alice
            .post_form(
                &format!("{}/admin/elicitations", server.base()),
                &server.base(),
                &[("csrf", "x"), ("action", "expire"), ("id", "x")],
            )
            .await;
        assert_eq!(posted.status, StatusCode::FORBIDDEN);
        server.stop().await;
    }
);
