//! The fake OAuth-protected MCP server itself (`common::fake_mcp_auth`): its challenge, metadata,
//! registration, code flow with PKCE and `resource`, Client ID Metadata Documents and the probe
//! switches behave as gatehouse's MCP-authorization tests will rely on; and the TypeScript SDK's
//! example server with `--oauth` challenges as an MCP server should.

mod common;

#[path = "fake_mcp_auth/client.rs"]
mod client;

use client::{
    REDIRECT, VERIFIER, authorize, exchange, get_json, http, mcp, redirect_query, register, serve_document, token,
    tool_text, www_authenticate,
};
use common::fake_mcp_auth::{
    ATTACKER_REDIRECT_URI, ATTACKER_REGISTER_URL, FakeMcpAuth, FakeMcpAuthSetup, IssMode, RegisterAnswer, WRONG_ISSUER,
    find,
};
use common::mcp_upstreams::{TsExampleServer, jsonrpc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use url::Url;

#[tokio::test]
async fn mcp_without_a_valid_token_is_challenged_with_the_resource_metadata() {
    let fake = FakeMcpAuth::start().await;
    let bare = mcp(&fake, None, "initialize", json!({})).await;
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        www_authenticate(&bare),
        format!(
            "Bearer resource_metadata=\"{}\", scope=\"mcp\"",
            fake.resource_metadata_url()
        )
    );

    let bogus = mcp(&fake, Some("not-a-token"), "initialize", json!({})).await;
    assert_eq!(bogus.status(), StatusCode::UNAUTHORIZED);
    assert!(www_authenticate(&bogus).starts_with("Bearer error=\"invalid_token\", resource_metadata="));

    // A live token issued for another resource is refused just the same.
    let elsewhere = fake.issue_token("alice", "c", "http://127.0.0.1:1/mcp", &["mcp"]);
    let refused = mcp(&fake, Some(&elsewhere), "ping", json!({})).await;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(fake.stats().mcp_bearer_tokens, ["not-a-token".to_owned(), elsewhere]);
    assert!(fake.stats().mcp_methods.is_empty(), "nothing unauthorized was served");

    fake.set_options(|o| o.resource_metadata_url = Some("http://10.0.0.1/prm".to_owned()));
    let moved = mcp(&fake, None, "ping", json!({})).await;
    assert!(www_authenticate(&moved).contains("resource_metadata=\"http://10.0.0.1/prm\""));
    fake.set_options(|o| {
        o.resource_metadata_in_challenge = false;
        o.challenge_scopes.clear();
    });
    assert_eq!(www_authenticate(&mcp(&fake, None, "ping", json!({})).await), "Bearer");
}

#[tokio::test]
async fn metadata_documents_follow_their_switches() {
    let fake = FakeMcpAuth::start().await;
    let base = fake.base_url();
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let prm = get_json(&format!("{base}{path}")).await;
        assert_eq!(prm["resource"], fake.mcp_url());
        assert_eq!(prm["authorization_servers"], json!([fake.issuer()]));
        assert_eq!(prm["scopes_supported"], json!(["mcp", "admin"]));
        assert_eq!(prm["bearer_methods_supported"], json!(["header"]));
    }
    let metadata = get_json(&format!("{base}/.well-known/oauth-authorization-server")).await;
    assert_eq!(metadata["issuer"], fake.issuer());
    assert_eq!(metadata["authorization_endpoint"], format!("{base}/authorize"));
    assert_eq!(metadata["token_endpoint"], format!("{base}/token"));
    assert_eq!(metadata["registration_endpoint"], format!("{base}/register"));
    assert_eq!(metadata["revocation_endpoint"], format!("{base}/revoke"));
    assert_eq!(metadata["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(metadata["client_id_metadata_document_supported"], json!(false));
    assert_eq!(
        get_json(&format!("{base}/.well-known/openid-configuration")).await["issuer"],
        fake.issuer()
    );

    fake.set_options(|o| {
        o.prm_overrides
            .insert("resource".to_owned(), json!("http://127.0.0.1:1/other"));
        o.prm_overrides
            .insert("authorization_servers".to_owned(), json!(["http://127.0.0.1:2"]));
        o.prm_at_path = false;
        o.registration_endpoint = false;
        o.cimd_supported = true;
        o.openid_configuration = false;
        o.as_metadata_overrides
            .insert("code_challenge_methods_supported".to_owned(), Value::Null);
    });
    let status = |url: String| async move { http().get(url).send().await.expect("GET").status() };
    assert_eq!(status(fake.resource_metadata_url()).await, StatusCode::NOT_FOUND);
    let prm = get_json(&format!("{base}/.well-known/oauth-protected-resource")).await;
    assert_eq!(prm["resource"], "http://127.0.0.1:1/other");
    assert_eq!(prm["authorization_servers"], json!(["http://127.0.0.1:2"]));
    let metadata = get_json(&format!("{base}/.well-known/oauth-authorization-server")).await;
    assert!(metadata.get("registration_endpoint").is_none(), "{metadata}");
    assert!(metadata.get("code_challenge_methods_supported").is_none(), "{metadata}");
    assert_eq!(metadata["client_id_metadata_document_supported"], json!(true));
    assert_eq!(
        status(format!("{base}/.well-known/openid-configuration")).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(fake.stats().discovery_requests.len(), 8);
}

#[tokio::test]
async fn a_separate_authorization_server_with_an_issuer_path() {
    let fake = FakeMcpAuth::start_with(FakeMcpAuthSetup {
        separate_authorization_server: true,
        issuer_path: "/tenant".to_owned(),
        host: None,
    })
    .await;
    let issuer = Url::parse(fake.issuer()).expect("issuer URL");
    assert_eq!(issuer.path(), "/tenant");
    assert_ne!(issuer.origin(), Url::parse(fake.base_url()).expect("URL").origin());
    let origin = issuer.origin().ascii_serialization();
    let metadata = get_json(&format!("{origin}/.well-known/oauth-authorization-server/tenant")).await;
    assert_eq!(metadata["issuer"], fake.issuer());
    assert_eq!(metadata["token_endpoint"], format!("{}/token", fake.issuer()));
    let prm = get_json(&fake.resource_metadata_url()).await;
    assert_eq!(prm["authorization_servers"], json!([fake.issuer()]));
    let misplaced = http()
        .get(format!("{}/.well-known/oauth-authorization-server", fake.base_url()))
        .send()
        .await
        .expect("GET");
    assert_eq!(
        misplaced.status(),
        StatusCode::NOT_FOUND,
        "the resource origin serves no AS"
    );
}

#[tokio::test]
async fn registration_code_flow_and_the_mcp_endpoint() {
    let fake = FakeMcpAuth::start().await;
    fake.set_next_user("bob");
    let registered = register(
        &fake,
        &json!({"redirect_uris": [REDIRECT], "client_name": "gatehouse", "grant_types": ["authorization_code", "refresh_token"]}),
    )
    .await;
    assert_eq!(registered.status(), StatusCode::CREATED);
    let client: Value = registered.json().await.expect("JSON");
    assert_eq!(client["redirect_uris"], json!([REDIRECT]));
    assert_eq!(client["token_endpoint_auth_method"], "client_secret_basic");
    assert!(client["client_id_issued_at"].is_u64());
    let id = client["client_id"].as_str().expect("client_id");
    let secret = client["client_secret"].as_str().expect("client_secret");

    let query = redirect_query(authorize(&fake, id, &[("scope", "mcp admin")]).await).await;
    assert_eq!(find(&query, "state"), Some("st4te"));
    assert_eq!(find(&query, "iss"), Some(fake.issuer()));
    let code = find(&query, "code").expect("a code");
    let resource = fake.mcp_url();
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", REDIRECT),
        ("code_verifier", VERIFIER),
        ("resource", &resource),
    ];
    let (status, body) = token(&fake, &form, Some((id, secret))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["expires_in"], 3600);
    assert_eq!(body["scope"], "mcp admin");
    let access = body["access_token"].as_str().expect("access_token");
    let (status, _) = token(&fake, &form, Some((id, secret))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "a code is good once");

    let init = mcp(
        &fake,
        Some(access),
        "initialize",
        json!({"protocolVersion": "2025-06-18"}),
    )
    .await;
    let init: Value = init.json().await.expect("JSON");
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(init["result"]["capabilities"], json!({"tools": {}}));
    let newest = mcp(
        &fake,
        Some(access),
        "initialize",
        json!({"protocolVersion": "2024-11-05"}),
    )
    .await;
    assert_eq!(
        newest.json::<Value>().await.expect("JSON")["result"]["protocolVersion"],
        "2025-11-25"
    );
    let initialized = http()
        .post(fake.mcp_url())
        .bearer_auth(access)
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(initialized.status(), StatusCode::ACCEPTED);
    let tools: Value = mcp(&fake, Some(access), "tools/list", json!({}))
        .await
        .json()
        .await
        .expect("JSON");
    assert_eq!(tools["result"]["tools"][0]["name"], "whoami");
    assert_eq!(tools["result"]["tools"][1]["name"], "admin_only");
    let who = tool_text(mcp(&fake, Some(access), "tools/call", json!({"name": "whoami"})).await).await;
    assert_eq!(
        serde_json::from_str::<Value>(&who).expect("JSON text"),
        json!({"account": "bob", "resource": resource, "client_id": id})
    );
    let admin = tool_text(mcp(&fake, Some(access), "tools/call", json!({"name": "admin_only"})).await).await;
    assert_eq!(admin, "admin ok for bob");
    assert_eq!(
        fake.stats().mcp_methods,
        [
            "initialize",
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/call",
            "tools/call"
        ]
    );

    // Refresh rotates; the old refresh token is then refused.
    let refresh = body["refresh_token"].as_str().expect("refresh_token");
    let refresh_form = [("grant_type", "refresh_token"), ("refresh_token", refresh)];
    let (status, refreshed) = token(&fake, &refresh_form, Some((id, secret))).await;
    assert_eq!(status, StatusCode::OK, "{refreshed}");
    assert_ne!(refreshed["access_token"], body["access_token"]);
    let (status, again) = token(&fake, &refresh_form, Some((id, secret))).await;
    assert_eq!(
        (status, again["error"].clone()),
        (StatusCode::BAD_REQUEST, json!("invalid_grant"))
    );
    assert_eq!(
        fake.stats()
            .token_requests
            .iter()
            .map(|r| r.grant_type.as_str())
            .collect::<Vec<_>>(),
        [
            "authorization_code",
            "authorization_code",
            "refresh_token",
            "refresh_token"
        ]
    );
    assert_eq!(fake.stats().token_requests[0].basic_client_id.as_deref(), Some(id));
    assert_eq!(
        fake.stats().token_requests[0].param("resource"),
        Some(resource.as_str())
    );

    // Revocation takes the access token out.
    let revoked = http()
        .post(format!("{}/revoke", fake.issuer()))
        .basic_auth(id, Some(secret))
        .form(&[("token", access)])
        .send()
        .await
        .expect("POST /revoke");
    assert_eq!(revoked.status(), StatusCode::OK);
    assert_eq!(fake.stats().revoked_tokens, [access.to_owned()]);
    assert_eq!(
        mcp(&fake, Some(access), "ping", json!({})).await.status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn admin_only_without_the_admin_scope_is_forbidden() {
    let fake = FakeMcpAuth::start().await;
    let token = fake.issue_token("carol", "c", &fake.mcp_url(), &["mcp"]);
    let call = mcp(&fake, Some(&token), "tools/call", json!({"name": "admin_only"})).await;
    assert_eq!(call.status(), StatusCode::FORBIDDEN);
    assert!(
        www_authenticate(&call).starts_with("Bearer error=\"insufficient_scope\", scope=\"admin\""),
        "{}",
        www_authenticate(&call)
    );
    fake.expire_all_access_tokens();
    assert_eq!(
        mcp(&fake, Some(&token), "ping", json!({})).await.status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn authorize_refuses_bad_requests_without_redirecting() {
    let fake = FakeMcpAuth::start().await;
    let client = fake.register_client(&[REDIRECT], "none");
    let id = client.client_id.as_str();
    let cases: [(&str, &[(&str, &str)]); 7] = [
        ("unknown client", &[("client_id", "nobody")]),
        (
            "unregistered redirect_uri",
            &[("redirect_uri", "http://127.0.0.1:9/other")],
        ),
        ("no PKCE", &[("code_challenge", ""), ("code_challenge_method", "")]),
        ("plain PKCE", &[("code_challenge_method", "plain")]),
        ("short challenge", &[("code_challenge", "short")]),
        ("no resource", &[("resource", "")]),
        ("another resource", &[("resource", "http://127.0.0.1:1/mcp")]),
    ];
    for (what, overrides) in cases {
        let response = authorize(&fake, id, overrides).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{what}");
        assert!(response.headers().get("location").is_none(), "{what}");
    }
    assert_eq!(fake.stats().authorize_requests.len(), 7);

    fake.set_options(|o| o.iss = IssMode::Wrong);
    let query = redirect_query(authorize(&fake, id, &[]).await).await;
    assert_eq!(find(&query, "iss"), Some(WRONG_ISSUER));
    fake.set_options(|o| o.iss = IssMode::Omitted);
    let query = redirect_query(authorize(&fake, id, &[]).await).await;
    assert_eq!(find(&query, "iss"), None);
}

#[tokio::test]
async fn the_token_endpoint_checks_client_pkce_and_resource() {
    let fake = FakeMcpAuth::start().await;
    let post = fake.register_client(&[REDIRECT], "client_secret_post");
    let secret = post.client_secret.clone().expect("a secret");
    let code = |fake: FakeMcpAuth, id: String| async move {
        let query = redirect_query(authorize(&fake, &id, &[]).await).await;
        find(&query, "code").expect("a code").to_owned()
    };
    let resource = fake.mcp_url();
    let c = code(fake.clone(), post.client_id.clone()).await;
    let (status, body) = token(
        &fake,
        &[
            ("grant_type", "authorization_code"),
            ("code", &c),
            ("redirect_uri", REDIRECT),
            ("code_verifier", VERIFIER),
            ("resource", &resource),
        ],
        Some((&post.client_id, &secret)),
    )
    .await;
    assert_eq!(
        (status, body["error"].clone()),
        (StatusCode::UNAUTHORIZED, json!("invalid_client")),
        "Basic for a post client"
    );

    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", c.as_str()),
        ("redirect_uri", REDIRECT),
        ("code_verifier", "a-different-verifier-of-forty-three-or-more-chars"),
        ("resource", resource.as_str()),
        ("client_id", post.client_id.as_str()),
        ("client_secret", secret.as_str()),
    ];
    let (status, body) = token(&fake, &form, None).await;
    assert_eq!(
        (status, body["error"].clone()),
        (StatusCode::BAD_REQUEST, json!("invalid_grant")),
        "wrong verifier"
    );

    let c = code(fake.clone(), post.client_id.clone()).await;
    form[1].1 = &c;
    form[3].1 = VERIFIER;
    form[4].1 = "http://127.0.0.1:1/mcp";
    let (status, body) = token(&fake, &form, None).await;
    assert_eq!(
        (status, body["error"].clone()),
        (StatusCode::BAD_REQUEST, json!("invalid_target")),
        "other resource"
    );

    let c = code(fake.clone(), post.client_id.clone()).await;
    form[1].1 = &c;
    form[4].1 = &resource;
    fake.set_options(|o| o.next_token_invalid_client = true);
    let (status, body) = token(&fake, &form, None).await;
    assert_eq!(
        (status, body["error"].clone()),
        (StatusCode::UNAUTHORIZED, json!("invalid_client")),
        "switch"
    );
    let (status, body) = token(&fake, &form, None).await;
    assert_eq!(status, StatusCode::OK, "the switch is one-shot: {body}");

    let refresh = body["refresh_token"].as_str().expect("refresh_token");
    fake.forget_clients();
    let (status, body) = token(
        &fake,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh),
            ("client_id", &post.client_id),
            ("client_secret", &secret),
        ],
        None,
    )
    .await;
    assert_eq!(
        (status, body["error"].clone()),
        (StatusCode::UNAUTHORIZED, json!("invalid_client")),
        "forgotten"
    );
}

#[tokio::test]
async fn registration_validates_and_its_probes_misbehave_as_promised() {
    let fake = FakeMcpAuth::start().await;
    for bad in [
        json!({"redirect_uris": []}),
        json!({"redirect_uris": ["http://example.com/cb"]}),
        json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "private_key_jwt"}),
    ] {
        let response = register(&fake, &bad).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    let public = register(
        &fake,
        &json!({"redirect_uris": ["https://gatehouse.example/oauth/callback"], "token_endpoint_auth_method": "none"}),
    )
    .await;
    let public: Value = public.json().await.expect("JSON");
    assert!(public.get("client_secret").is_none(), "{public}");

    fake.set_options(|o| o.register_answer = RegisterAnswer::AttackerRedirectUris);
    let hijacked: Value = register(&fake, &json!({"redirect_uris": [REDIRECT]}))
        .await
        .json()
        .await
        .expect("JSON");
    assert_eq!(hijacked["redirect_uris"], json!([ATTACKER_REDIRECT_URI]));
    fake.set_options(|o| o.register_answer = RegisterAnswer::RedirectElsewhere);
    let moved = register(&fake, &json!({"redirect_uris": [REDIRECT]})).await;
    assert_eq!(moved.status(), StatusCode::FOUND);
    assert_eq!(moved.headers()["location"], ATTACKER_REGISTER_URL);
    assert_eq!(fake.stats().registrations.len(), 6);
    assert_eq!(fake.clients().len(), 2, "the public client and the hijacked one");

    fake.set_options(|o| o.registration_endpoint = false);
    assert_eq!(
        register(&fake, &json!({"redirect_uris": [REDIRECT]})).await.status(),
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn client_id_metadata_documents_are_fetched_and_checked() {
    let fake = FakeMcpAuth::start().await;
    let good = serve_document(|url| {
        json!({"client_id": url, "client_name": "gatehouse", "redirect_uris": [REDIRECT],
               "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
               "token_endpoint_auth_method": "none"})
    })
    .await;
    let liar =
        serve_document(|_| json!({"client_id": "https://other.example/doc.json", "redirect_uris": [REDIRECT]})).await;

    let unsupported = authorize(&fake, &good, &[]).await;
    assert_eq!(
        unsupported.status(),
        StatusCode::BAD_REQUEST,
        "CIMD switched off: an unknown client"
    );
    assert!(fake.stats().cimd_fetches.is_empty());

    fake.set_options(|o| o.cimd_supported = true);
    let query = redirect_query(authorize(&fake, &good, &[]).await).await;
    let code = find(&query, "code").expect("a code");
    let (status, body) = exchange(&fake, &good, code).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let who = tool_text(
        mcp(
            &fake,
            body["access_token"].as_str(),
            "tools/call",
            json!({"name": "whoami"}),
        )
        .await,
    )
    .await;
    assert!(who.contains(&format!("\"client_id\":\"{good}\"")), "{who}");

    let refused = authorize(&fake, &liar, &[]).await;
    assert_eq!(
        refused.status(),
        StatusCode::BAD_REQUEST,
        "a document naming another client_id"
    );
    let unlisted = authorize(&fake, &good, &[("redirect_uri", "http://127.0.0.1:9/elsewhere")]).await;
    assert_eq!(
        unlisted.status(),
        StatusCode::BAD_REQUEST,
        "a redirect_uri the document does not list"
    );
    assert_eq!(fake.stats().cimd_fetches, [good.clone(), liar, good]);
}

#[tokio::test]
async fn the_typescript_example_with_oauth_challenges_and_names_its_resource() {
    let Some(server) = TsExampleServer::start_with_oauth().await else {
        return;
    };
    let url = Url::parse(server.url()).expect("URL");
    assert_eq!(url.host_str(), Some("localhost"));
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let reply = jsonrpc(server.url(), &[], &initialize).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.body);
    let challenge = reply.header("www-authenticate").unwrap_or_default();
    let metadata_url = challenge
        .split("resource_metadata=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no resource_metadata in {challenge:?}"));
    let prm = get_json(metadata_url).await;
    assert_eq!(prm["resource"], server.url(), "{prm}");
    assert!(
        prm["authorization_servers"][0]
            .as_str()
            .is_some_and(|s| s.starts_with("http://localhost:")),
        "{prm}"
    );
}

#[tokio::test]
async fn rmcp_client_talks_to_the_fake_with_a_bearer_token() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    // rmcp's reqwest is built without a TLS provider (gatehouse gives its own); plain HTTP here.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let fake = FakeMcpAuth::start().await;
    let token = fake.issue_token("dave", "configured", &fake.mcp_url(), &["mcp"]);
    let config = StreamableHttpClientTransportConfig::with_uri(fake.mcp_url()).auth_header(token.clone());
    let client =
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .expect("rmcp initializes against the fake");
    let tools = client.list_all_tools().await.expect("tools/list");
    assert_eq!(
        tools.iter().map(|t| t.name.as_ref()).collect::<Vec<_>>(),
        ["whoami", "admin_only"]
    );
    let result = client
        .call_tool(CallToolRequestParams::new("whoami"))
        .await
        .expect("tools/call");
    let text = result.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .expect("text content");
    assert!(text.contains("\"account\":\"dave\""), "{text}");
    client.cancel().await.expect("close the client");
    assert!(fake.stats().mcp_bearer_tokens.iter().all(|seen| *seen == token));
    assert!(
        fake.stats()
            .mcp_methods
            .starts_with(&["initialize".to_owned(), "notifications/initialized".to_owned()])
    );
}
