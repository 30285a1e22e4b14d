//! The fake identity provider itself (`common::fake_idp`): what clients and resource servers under
//! test will rely on — discovery, the code flow with PKCE and `resource`, tokens that verify
//! against its JWKS, key rotation, a JWKS that fails on demand, registration, introspection and
//! token exchange.

mod common;

use common::fake_idp::{EC_KID, FakeIdp, FakeIdpOptions, JwksFault, Signer, TestClient, TestUser};
use common::fake_oauth::s256_challenge;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use reqwest::StatusCode;
use serde_json::{Value, json};
use url::Url;

const REDIRECT: &str = "http://127.0.0.1:9/callback";
const RESOURCE: &str = "https://gatehouse.test/mcp";
const VERIFIER: &str = "a-code-verifier-of-forty-three-or-more-characters";

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("an HTTP client")
}

/// A provider knowing alice, signed in, and `client` (confidential when `secret` is given).
async fn provider(options: FakeIdpOptions, secret: Option<&str>) -> FakeIdp {
    let idp = FakeIdp::start(options).await;
    idp.add_user(TestUser {
        sub: "alice".to_owned(),
        name: "Alice Example".to_owned(),
        email: "alice@example.test".to_owned(),
        groups: vec!["admins".to_owned()],
    });
    idp.sign_in_as("alice");
    idp.register_client(TestClient {
        id: "client".to_owned(),
        secret: secret.map(str::to_owned),
        redirect_uris: vec![REDIRECT.to_owned()],
    });
    idp
}

async fn get_json(url: &str) -> Value {
    let response = http().get(url).send().await.expect("GET");
    assert_eq!(response.status(), StatusCode::OK, "GET {url}");
    response.json().await.expect("a JSON body")
}

/// `/authorize` for `client` with the test's PKCE verifier: the redirect's query.
async fn authorize(idp: &FakeIdp, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let challenge = s256_challenge(VERIFIER);
    let mut url = Url::parse(&format!("{}/authorize", idp.issuer())).expect("URL");
    url.query_pairs_mut()
        .extend_pairs([
            ("response_type", "code"),
            ("client_id", "client"),
            ("redirect_uri", REDIRECT),
            ("state", "st4te"),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ])
        .extend_pairs(extra);
    let response = http().get(url).send().await.expect("GET /authorize");
    assert_eq!(response.status(), StatusCode::FOUND);
    let location = response.headers()[reqwest::header::LOCATION]
        .to_str()
        .expect("Location");
    let location = Url::parse(location).expect("an absolute Location");
    assert!(location.as_str().starts_with(REDIRECT), "{location}");
    location.query_pairs().into_owned().collect()
}

fn field<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// POSTs `form` to `/token` (Basic auth as `client` when `secret` is given).
async fn token(idp: &FakeIdp, secret: Option<&str>, form: &[(&str, &str)]) -> (StatusCode, Value) {
    let mut request = http().post(format!("{}/token", idp.issuer())).form(form);
    if let Some(secret) = secret {
        request = request.basic_auth("client", Some(secret));
    }
    let response = request.send().await.expect("POST /token");
    (response.status(), response.json().await.expect("a JSON body"))
}

/// Verifies `jwt` against the provider's JWKS as a resource server would: the claims.
async fn verify(idp: &FakeIdp, jwt: &str, audience: &str) -> Result<Value, jsonwebtoken::errors::Error> {
    let jwks: JwkSet =
        serde_json::from_value(get_json(&format!("{}/protocol/openid-connect/certs", idp.issuer())).await)
            .expect("a JWK Set");
    let header = jsonwebtoken::decode_header(jwt)?;
    let jwk = header
        .kid
        .as_deref()
        .and_then(|kid| jwks.find(kid))
        .ok_or(jsonwebtoken::errors::ErrorKind::InvalidKeyFormat)?;
    let mut validation = Validation::new(header.alg);
    validation.set_audience(&[audience]);
    validation.set_issuer(&[idp.issuer()]);
    Ok(jsonwebtoken::decode::<Value>(jwt, &DecodingKey::from_jwk(jwk)?, &validation)?.claims)
}

#[tokio::test]
async fn discovery_at_both_well_known_addresses() {
    let idp = provider(FakeIdpOptions::default(), None).await;
    let base = idp.issuer().replace("/realms/test", "");
    for url in [
        format!("{base}/.well-known/oauth-authorization-server/realms/test"),
        format!("{}/.well-known/openid-configuration", idp.issuer()),
    ] {
        let metadata = get_json(&url).await;
        assert_eq!(metadata["issuer"], idp.issuer());
        assert_eq!(metadata["token_endpoint"], format!("{}/token", idp.issuer()));
        assert_eq!(metadata["code_challenge_methods_supported"], json!(["S256"]));
        let jwks = get_json(metadata["jwks_uri"].as_str().expect("jwks_uri")).await;
        assert!(jwks["keys"].as_array().is_some_and(|keys| keys.len() == 2), "{jwks}");
        let rsa = &jwks["keys"][0];
        assert_eq!(
            (&rsa["kty"], &rsa["use"], &rsa["alg"]),
            (&json!("RSA"), &json!("sig"), &json!("RS256"))
        );
        assert!(
            rsa["n"].is_string() && rsa["e"].is_string() && rsa["kid"].is_string(),
            "{rsa}"
        );
    }
    let stats = idp.stats();
    assert_eq!((stats.metadata_fetches, stats.jwks_fetches), (2, 2));

    let quiet = FakeIdp::start(FakeIdpOptions {
        rfc8414: false,
        ..FakeIdpOptions::default()
    })
    .await;
    let base = quiet.issuer().replace("/realms/test", "");
    let rfc8414 = format!("{base}/.well-known/oauth-authorization-server/realms/test");
    let response = http().get(rfc8414).send().await.expect("GET");
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    get_json(&format!("{}/.well-known/openid-configuration", quiet.issuer())).await;
}

#[tokio::test]
async fn code_flow_with_pkce_and_resource_issues_verifiable_tokens() {
    let idp = provider(FakeIdpOptions::default(), Some("s3cret")).await;
    let redirect = authorize(
        &idp,
        &[("scope", "openid mcp"), ("nonce", "n0nce"), ("resource", RESOURCE)],
    )
    .await;
    assert_eq!(field(&redirect, "state"), Some("st4te"));
    assert_eq!(field(&redirect, "iss"), Some(idp.issuer().as_str()));
    let code = field(&redirect, "code").expect("a code").to_owned();
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", REDIRECT),
        ("code_verifier", VERIFIER),
        ("resource", RESOURCE),
    ];
    let (status, answer) = token(&idp, Some("s3cret"), &form).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        (&answer["token_type"], &answer["scope"]),
        (&json!("Bearer"), &json!("openid mcp"))
    );
    assert_eq!(
        field(&idp.last_token_request().expect("recorded"), "code_verifier").map(str::to_owned),
        Some(VERIFIER.to_owned())
    );

    let access = verify(&idp, answer["access_token"].as_str().expect("access_token"), RESOURCE)
        .await
        .expect("the access token verifies against the JWKS");
    assert_eq!(
        (&access["sub"], &access["scope"], &access["client_id"]),
        (&json!("alice"), &json!("openid mcp"), &json!("client"))
    );
    assert_eq!(access["groups"], json!(["admins"]));
    let id_token = verify(&idp, answer["id_token"].as_str().expect("id_token"), "client")
        .await
        .expect("the id_token verifies against the JWKS");
    assert_eq!(
        (&id_token["nonce"], &id_token["email"]),
        (&json!("n0nce"), &json!("alice@example.test"))
    );

    let (status, again) = token(&idp, Some("s3cret"), &form).await;
    assert_eq!(
        (status, &again["error"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_grant"))
    );
    let (status, wrong_secret) = token(&idp, Some("guess"), &form).await;
    assert_eq!(
        (status, &wrong_secret["error"]),
        (StatusCode::UNAUTHORIZED, &json!("invalid_client"))
    );

    let refresh_token = answer["refresh_token"].as_str().expect("refresh_token");
    let refresh = [("grant_type", "refresh_token"), ("refresh_token", refresh_token)];
    let (status, refreshed) = token(&idp, Some("s3cret"), &refresh).await;
    assert_eq!(status, StatusCode::OK, "{refreshed}");
    let (status, replayed) = token(&idp, Some("s3cret"), &refresh).await;
    assert_eq!(
        (status, &replayed["error"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_grant"))
    );
}

#[tokio::test]
async fn a_wrong_pkce_verifier_is_refused() {
    let idp = provider(FakeIdpOptions::default(), None).await;
    let redirect = authorize(&idp, &[("scope", "mcp")]).await;
    let code = field(&redirect, "code").expect("a code");
    let form = [
        ("grant_type", "authorization_code"),
        ("client_id", "client"),
        ("code", code),
        ("redirect_uri", REDIRECT),
        ("code_verifier", "another-code-verifier-of-forty-three-characters"),
    ];
    let (status, answer) = token(&idp, None, &form).await;
    assert_eq!(
        (status, &answer["error"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_grant"))
    );
}

#[tokio::test]
async fn rotation_changes_the_kid_and_the_jwks() {
    let idp = provider(FakeIdpOptions::default(), None).await;
    let before = idp.access_token("alice", RESOURCE, "mcp");
    let first = idp.current_kid();

    idp.rotate_keys(true);
    assert_ne!(idp.current_kid(), first);
    let kids = |jwks: Value| -> Vec<String> {
        jwks["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .map(|k| k["kid"].as_str().expect("kid").to_owned())
            .collect()
    };
    assert_eq!(kids(idp.jwks()), [idp.current_kid(), first.clone(), EC_KID.to_owned()]);
    verify(&idp, &before, RESOURCE)
        .await
        .expect("the old key is still published");

    idp.rotate_keys(false);
    assert_eq!(kids(idp.jwks()), [idp.current_kid(), EC_KID.to_owned()]);
    verify(&idp, &before, RESOURCE).await.expect_err("the old key is gone");
    let after = idp.access_token("alice", RESOURCE, "mcp");
    verify(&idp, &after, RESOURCE)
        .await
        .expect("signed by the new current key");
}

#[tokio::test]
async fn a_broken_jwks_fails_as_told_and_comes_back() {
    let idp = provider(FakeIdpOptions::default(), None).await;
    let url = format!("{}/protocol/openid-connect/certs", idp.issuer());
    let fetch = async || {
        let response = http().get(&url).send().await.expect("GET the JWKS");
        (response.status(), response.text().await.expect("a body"))
    };
    idp.break_jwks(Some(JwksFault::Unavailable));
    assert_eq!(fetch().await.0, StatusCode::SERVICE_UNAVAILABLE);
    idp.break_jwks(Some(JwksFault::Garbage));
    let (status, body) = fetch().await;
    assert_eq!(status, StatusCode::OK);
    assert!(serde_json::from_str::<Value>(&body).is_err(), "{body}");
    idp.break_jwks(Some(JwksFault::NoKeys));
    let (status, body) = fetch().await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, r#"{"keys":[]}"#));
    idp.break_jwks(None);
    let (status, body) = fetch().await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(serde_json::from_str::<Value>(&body).expect("JSON"), idp.jwks());
    assert_eq!(idp.stats().jwks_fetches, 4, "each counts");
}

#[tokio::test]
async fn signers_make_what_a_verifier_must_accept_or_refuse() {
    let idp = provider(FakeIdpOptions::default(), None).await;
    let claims = idp.claims("alice", RESOURCE, "mcp");
    for (signer, accepted) in [
        (Signer::Current, true),
        (Signer::Es256, true),
        (Signer::Stranger, false),
        (Signer::NoneAlg, false),
        (Signer::Hs256WithPublicKey, false),
    ] {
        // Every token names the current kid (or ES256's own), so only the signature can tell.
        let kid = (signer != Signer::Es256).then(|| idp.current_kid());
        let jwt = idp.sign(signer, kid.as_deref(), claims.clone());
        assert_eq!(verify(&idp, &jwt, RESOURCE).await.is_ok(), accepted, "{signer:?}");
    }
    // The key-confusion token really is HS256 keyed with the public PEM.
    let confused = idp.sign(Signer::Hs256WithPublicKey, None, claims.clone());
    let mut validation = Validation::new(Algorithm::HS256);
    validation.set_audience(&[RESOURCE]);
    let key = DecodingKey::from_secret(include_bytes!("fixtures/idp/rsa-1.pub.pem"));
    jsonwebtoken::decode::<Value>(&confused, &key, &validation).expect("HS256 with the public PEM");
    let mut expired = claims;
    expired["exp"] = json!(1_000_000_000);
    let expired = idp.sign(Signer::Current, None, expired);
    verify(&idp, &expired, RESOURCE).await.expect_err("an expired token");
}

#[tokio::test]
async fn dynamic_registration_makes_usable_clients() {
    let idp = provider(FakeIdpOptions::default(), None).await;
    let register = |body: Value| {
        let request = http().post(format!("{}/register", idp.issuer())).json(&body);
        async move {
            let response = request.send().await.expect("POST /register");
            (response.status(), response.json::<Value>().await.expect("a JSON body"))
        }
    };
    let (status, public) =
        register(json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none", "client_name": "cli"}))
            .await;
    assert_eq!(status, StatusCode::CREATED, "{public}");
    assert_eq!(
        (&public["client_name"], public.get("client_secret")),
        (&json!("cli"), None)
    );
    let (status, confidential) = register(json!({"redirect_uris": [REDIRECT]})).await;
    assert_eq!(status, StatusCode::CREATED, "{confidential}");
    assert_eq!(confidential["token_endpoint_auth_method"], "client_secret_basic");
    assert!(confidential["client_secret"].is_string());
    let (status, refused) = register(json!({"redirect_uris": ["not a uri"]})).await;
    assert_eq!(
        (status, &refused["error"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_redirect_uri"))
    );
    assert_eq!(idp.stats().registrations, 3);
}

#[tokio::test]
async fn opaque_tokens_are_introspected() {
    let options = FakeIdpOptions {
        opaque_access_tokens: true,
        ..FakeIdpOptions::default()
    };
    let idp = provider(options, Some("s3cret")).await;
    let opaque = idp.access_token("alice", RESOURCE, "mcp");
    assert!(!opaque.contains('.'), "opaque, not a JWT: {opaque}");
    let introspect = |token: &str, secret: &str| {
        let request = http()
            .post(format!("{}/introspect", idp.issuer()))
            .basic_auth("client", Some(secret))
            .form(&[("token", token)]);
        async move {
            let response = request.send().await.expect("POST /introspect");
            (response.status(), response.json::<Value>().await.expect("a JSON body"))
        }
    };
    let (status, live) = introspect(&opaque, "s3cret").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (&live["active"], &live["sub"], &live["aud"]),
        (&json!(true), &json!("alice"), &json!(RESOURCE))
    );
    let (_, unknown) = introspect("at_nobody-issued-this", "s3cret").await;
    assert_eq!(unknown, json!({"active": false}));
    let (status, _) = introspect(&opaque, "guess").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(idp.stats().introspections, 3);
}

/// RFC 8693 for a confidential client: a live token it issued becomes one for the `audience`
/// asked for, verifiable against its keys; public clients, unknown tokens and a refusal the test
/// sets are refused with their RFC 6749 5.2 errors.
#[tokio::test]
async fn token_exchange_issues_a_token_for_the_audience_asked_for() {
    const GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
    const ACCESS: &str = "urn:ietf:params:oauth:token-type:access_token";
    let idp = provider(FakeIdpOptions::default(), Some("s3cret")).await;
    let subject = idp.access_token("alice", RESOURCE, "mcp");
    let form = |subject: &str| {
        vec![
            ("grant_type", GRANT.to_owned()),
            ("subject_token", subject.to_owned()),
            ("subject_token_type", ACCESS.to_owned()),
            ("audience", "docs-api".to_owned()),
            ("scope", "docs".to_owned()),
        ]
    };
    let send = async |secret: Option<&str>, form: Vec<(&'static str, String)>| {
        let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
        token(&idp, secret, &pairs).await
    };

    let (status, body) = send(Some("s3cret"), form(&subject)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["issued_token_type"], ACCESS);
    let exchanged = body["access_token"].as_str().expect("a token");
    let claims = verify(&idp, exchanged, "docs-api")
        .await
        .expect("verifies for docs-api");
    assert_eq!(
        (claims["sub"].as_str(), claims["scope"].as_str()),
        (Some("alice"), Some("docs"))
    );

    let (status, body) = send(Some("s3cret"), form("not-a-token")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_grant"))
    );
    idp.refuse_exchanges(Some("interaction_required"));
    let (_, body) = send(Some("s3cret"), form(&subject)).await;
    assert_eq!(body["error"], "interaction_required");
    idp.register_client(TestClient {
        id: "client".to_owned(),
        secret: None,
        redirect_uris: vec![REDIRECT.to_owned()],
    });
    let mut public = form(&subject);
    public.push(("client_id", "client".to_owned()));
    let (_, body) = send(None, public).await;
    assert_eq!(body["error"], "unauthorized_client");
    assert_eq!(idp.stats().token_exchanges, 4);
}
