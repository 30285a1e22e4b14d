//! Unit tests of the connections room on an in-memory store. Nothing listens at the test
//! provider's URLs: the paths that reach a provider (code exchange, refresh, revocation) are
//! covered by the integration tests against the fake provider in tests/common/fake_oauth.rs.

use chrono::Utc;

use super::*;
use crate::gate::Gate;
use crate::gate::testing::{CONFIG, Fixture, alice, principal, stored};
use crate::store::{ElicitationStatus, RefreshLease, RefreshedTokens};

/// What the store grants `principal` of `provider` for a call from nowhere in particular.
async fn grant(gate: &Gate, principal: &Principal, provider: &str, scopes: &[String]) -> Grant {
    let connections = gate.connections();
    let provider = connections.provider(provider).await.expect("found").expect("provider");
    connections
        .grant(principal, &provider, scopes, &Origin::unknown())
        .await
        .expect("grant")
}

/// What the callback `params` comes to for `principal`, in a browser holding `cookie`.
async fn callback(
    gate: &Gate,
    principal: &Principal,
    params: &CallbackParams,
    cookie: Option<&str>,
) -> CallbackOutcome {
    gate.connections()
        .callback(principal, params, cookie, &Origin::unknown())
        .await
        .expect("callback")
}

fn scopes(grant: &Grant) -> Vec<String> {
    match grant {
        Grant::SignIn { scopes } => scopes.clone(),
        Grant::Usable { .. } => panic!("expected a sign-in"),
    }
}

#[tokio::test]
async fn grants_follow_the_stored_connection() {
    let (fixture, gate, session) = alice().await;
    let connections = gate.connections();
    let alice = &session.principal;

    let none = grant(&gate, alice, "acme", &[]).await;
    assert_eq!(
        scopes(&none),
        ["read"],
        "no connection: sign in with the configured scopes"
    );

    let stored = fixture.connect(&gate, &session, &["read"], None).await;
    match grant(&gate, alice, "acme", &[]).await {
        Grant::Usable { token, version } => {
            assert_eq!(token.expose(), "access-token-1");
            assert_eq!(version, stored.updated_at);
        }
        Grant::SignIn { .. } => panic!("a fresh connection is usable"),
    }
    let step_up = grant(&gate, alice, "acme", &["write".into()]).await;
    assert_eq!(scopes(&step_up), ["read", "write"], "step-up asks for the union");

    connections
        .token_rejected(
            alice,
            "acme",
            stored.updated_at - chrono::Duration::seconds(5),
            &Origin::unknown(),
        )
        .await
        .expect("stale version");
    assert!(
        matches!(grant(&gate, alice, "acme", &[]).await, Grant::Usable { .. }),
        "a refusal of an older version breaks nothing"
    );
    connections
        .token_rejected(alice, "acme", stored.updated_at, &Origin::unknown())
        .await
        .expect("reject");
    let broken = grant(&gate, alice, "acme", &[]).await;
    assert_eq!(scopes(&broken), ["read"], "a broken connection asks for a new sign-in");
    let summaries = connections.summaries(alice).await.expect("summaries");
    assert_eq!(summaries.len(), 1);
    assert!(!summaries[0].active);
    assert_eq!(summaries[0].provider_name, "ACME");
}

#[tokio::test]
async fn a_sign_in_is_asked_for_only_when_the_store_has_no_usable_connection() {
    let (fixture, gate, session) = alice().await;
    let alice = &session.principal;
    fixture.connect(&gate, &session, &["read"], None).await;
    // As on a replica that cached no connection and has not yet had the bus's notice of the
    // sign-in another replica just stored (whose completion the client may already have).
    fixture.cache.insert(alice.clone(), Arc::new(Vec::new()));
    match grant(&gate, alice, "acme", &[]).await {
        Grant::Usable { token, .. } => assert_eq!(token.expose(), "access-token-1"),
        Grant::SignIn { .. } => panic!("the stored connection is used, not the stale cache"),
    }
    assert_eq!(
        fixture.cache.get(alice).map(|cached| cached.len()),
        Some(1),
        "the cache holds what the store had"
    );
}

#[tokio::test]
async fn an_expiring_token_without_a_refresh_token_needs_a_new_sign_in() {
    let (fixture, gate, session) = alice().await;
    fixture.connect(&gate, &session, &["read"], Some(Utc::now())).await;
    let grant = grant(&gate, &session.principal, "acme", &[]).await;
    assert_eq!(scopes(&grant), ["read"]);
}

#[tokio::test]
async fn disconnecting_without_a_revocation_endpoint() {
    let (fixture, gate, session) = alice().await;
    let connections = gate.connections();
    assert_eq!(
        connections
            .disconnect(&session.principal, "acme", &Origin::unknown())
            .await
            .expect("disconnect"),
        Disconnected::NothingConnected
    );
    fixture.connect(&gate, &session, &["read"], None).await;
    assert_eq!(
        connections
            .disconnect(&session.principal, "acme", &Origin::unknown())
            .await
            .expect("disconnect"),
        Disconnected::NoRevocation
    );
    assert!(
        connections
            .summaries(&session.principal)
            .await
            .expect("list")
            .is_empty()
    );
}

/// Starts a flow and returns the callback query for it and the browser's cookie.
async fn started(gate: &Gate, elicitation: &ElicitationRecord, extra: &str) -> (CallbackParams, String) {
    let flow = gate
        .connections()
        .start_flow(elicitation)
        .await
        .expect("start")
        .expect("a provider elicitation");
    let query: std::collections::HashMap<String, String> = flow.authorize_url.query_pairs().into_owned().collect();
    assert_eq!(query["redirect_uri"], "http://127.0.0.1:8080/oauth/callback");
    assert_eq!(query["code_challenge_method"], "S256");
    assert!(
        flow.cookie_name.starts_with("gatehouse-flow-"),
        "no __Host- prefix over http"
    );
    let params = CallbackParams::from_query(&format!("state={}{extra}", query["state"])).expect("params");
    assert_eq!(gate.connections().flow_cookie_name(&params), flow.cookie_name);
    (params, flow.cookie_value)
}

#[tokio::test]
async fn callbacks_that_do_not_match_their_flow_are_refused_and_change_nothing() {
    let (fixture, gate, session) = alice().await;
    let asked = fixture.ask(gate.elicitations(), &session, "acme").await;
    let alice = &session.principal;
    for query in ["code=x", "state=&state=abc", &format!("state={}", "s".repeat(513))] {
        assert_eq!(
            CallbackParams::from_query(query).err(),
            Some(CallbackRefusal::UnknownState),
            "{query}"
        );
    }
    let (params, cookie) = started(&gate, &asked, "&code=abc&iss=http%3A%2F%2F127.0.0.1%3A9").await;
    // Refused, with the way back to the still-open request for its own user only.
    let refused = |refusal, own: bool| CallbackOutcome::Refused {
        refusal,
        retry: own.then(|| asked.url.clone()),
    };

    let unknown = CallbackParams::from_query("state=forged&code=abc").expect("params");
    let outcome = callback(&gate, alice, &unknown, Some(&cookie)).await;
    assert_eq!(outcome, refused(CallbackRefusal::UnknownState, false));
    let outcome = callback(&gate, alice, &params, Some("other")).await;
    assert_eq!(outcome, refused(CallbackRefusal::OtherBrowser, true));
    let outcome = callback(&gate, alice, &params, None).await;
    assert_eq!(outcome, refused(CallbackRefusal::OtherBrowser, true));
    let outcome = callback(&gate, &principal("mallory"), &params, Some(&cookie)).await;
    assert_eq!(outcome, refused(CallbackRefusal::OtherUser, false));
    let (wrong_iss, cookie2) = started(&gate, &asked, "&code=abc&iss=https%3A%2F%2Fevil.example").await;
    let outcome = callback(&gate, alice, &wrong_iss, Some(&cookie2)).await;
    assert_eq!(outcome, refused(CallbackRefusal::WrongIssuer, true));

    let still = stored(&gate, &asked).await;
    assert_eq!(still.status, ElicitationStatus::Pending, "refusals change nothing");
}

#[tokio::test]
async fn callbacks_without_their_issuer_or_with_another_providers_are_refused() {
    let (fixture, gate, session) = alice().await;
    let alice = &session.principal;
    let acme = fixture.ask(gate.elicitations(), &session, "acme").await;
    let initech = fixture.ask(gate.elicitations(), &session, "initech").await;
    let cases = [
        (&acme, "&code=abc", CallbackRefusal::MissingIssuer),
        (&acme, "&error=access_denied", CallbackRefusal::MissingIssuer),
        (
            &acme,
            "&code=abc&iss=http%3A%2F%2F127.0.0.1%3A9%2Fglobex",
            CallbackRefusal::WrongIssuer,
        ),
        // A provider without an issuer shares the redirect URI: another provider's answer
        // (mix-up) must not pass as its own.
        (
            &initech,
            "&code=abc&iss=http%3A%2F%2F127.0.0.1%3A9%2Fglobex",
            CallbackRefusal::WrongIssuer,
        ),
        (
            &initech,
            "&code=abc&iss=http%3A%2F%2F127.0.0.1%3A9",
            CallbackRefusal::WrongIssuer,
        ),
    ];
    for (asked, extra, refusal) in cases {
        let (params, cookie) = started(&gate, asked, extra).await;
        let outcome = callback(&gate, alice, &params, Some(&cookie)).await;
        let retry = Some(asked.url.clone());
        assert_eq!(
            outcome,
            CallbackOutcome::Refused { refusal, retry },
            "{} {extra}",
            asked.requirement
        );
    }
    for asked in [&acme, &initech] {
        let still = stored(&gate, asked).await;
        assert_eq!(still.status, ElicitationStatus::Pending, "refusals change nothing");
    }
}

#[tokio::test]
async fn an_issuer_sent_only_sometimes_is_checked_when_sent() {
    let (fixture, gate, session) = alice().await;
    let alice = &session.principal;
    let globex = fixture.ask(gate.elicitations(), &session, "globex").await;
    for (extra, refusal) in [
        (
            "&error=access_denied&iss=http%3A%2F%2F127.0.0.1%3A9",
            CallbackRefusal::WrongIssuer,
        ),
        (
            "&error=access_denied&iss=https%3A%2F%2Fevil.example",
            CallbackRefusal::WrongIssuer,
        ),
    ] {
        let (params, cookie) = started(&gate, &globex, extra).await;
        let outcome = callback(&gate, alice, &params, Some(&cookie)).await;
        let retry = Some(globex.url.clone());
        assert_eq!(outcome, CallbackOutcome::Refused { refusal, retry }, "{extra}");
    }
    let (silent, cookie) = started(&gate, &globex, "&error=access_denied").await;
    let outcome = callback(&gate, alice, &silent, Some(&cookie)).await;
    assert!(
        matches!(outcome, CallbackOutcome::Declined { .. }),
        "an answer without iss is read: {outcome:?}"
    );
}

#[tokio::test]
async fn a_provider_refusal_declines_and_uses_up_the_flow() {
    let (fixture, gate, session) = alice().await;
    let asked = fixture.ask(gate.elicitations(), &session, "acme").await;
    let (params, cookie) = started(&gate, &asked, "&error=access_denied&iss=http%3A%2F%2F127.0.0.1%3A9").await;
    let outcome = callback(&gate, &session.principal, &params, Some(&cookie)).await;
    assert_eq!(
        outcome,
        CallbackOutcome::Declined {
            provider_name: "ACME".into()
        }
    );
    let declined = stored(&gate, &asked).await;
    assert_eq!(declined.status, ElicitationStatus::Declined);
    let replay = callback(&gate, &session.principal, &params, Some(&cookie)).await;
    let ended = CallbackOutcome::Refused {
        refusal: CallbackRefusal::AlreadyUsed,
        retry: None,
    };
    assert_eq!(replay, ended, "declined: no way back");
}

#[tokio::test]
async fn provider_errors_store_nothing_and_keep_the_way_back() {
    let (fixture, gate, session) = alice().await;
    let alice = &session.principal;
    let asked = fixture.ask(gate.elicitations(), &session, "acme").await;
    let retry = Some(asked.url.clone());
    let iss = "&iss=http%3A%2F%2F127.0.0.1%3A9";
    let (params, cookie) = started(&gate, &asked, &format!("&error=server_error{iss}")).await;
    let outcome = callback(&gate, alice, &params, Some(&cookie)).await;
    assert_eq!(
        outcome,
        CallbackOutcome::ProviderFailed {
            provider_name: "ACME".into(),
            error: Some(ProviderErrorCode::parse("server_error")),
            retry: asked.url.clone(),
        }
    );
    let (params, cookie) = started(&gate, &asked, iss).await;
    let outcome = callback(&gate, alice, &params, Some(&cookie)).await;
    let no_code = CallbackOutcome::Refused {
        refusal: CallbackRefusal::NoCode,
        retry: retry.clone(),
    };
    assert_eq!(outcome, no_code);
    let still = stored(&gate, &asked).await;
    assert_eq!(still.status, ElicitationStatus::Pending, "the request is still open");

    let replay = callback(&gate, alice, &params, Some(&cookie)).await;
    let used = |retry| CallbackOutcome::Refused {
        refusal: CallbackRefusal::AlreadyUsed,
        retry,
    };
    assert_eq!(replay, used(retry), "a reload: nothing stored, the way back");
    let stranger = callback(&gate, &principal("mallory"), &params, Some(&cookie)).await;
    assert_eq!(stranger, used(None), "another user learns nothing");
}

#[test]
fn provider_error_codes_are_kept_only_when_readable() {
    assert_eq!(ProviderErrorCode::parse("server_error").as_str(), "server_error");
    for unreadable in [
        "",
        "line\nbreak",
        "quote\"d",
        "back\\slash",
        "caf\u{e9}",
        &"x".repeat(65),
    ] {
        assert_eq!(
            ProviderErrorCode::parse(unreadable).as_str(),
            "unreadable",
            "{unreadable:?}"
        );
    }
}

#[tokio::test]
async fn a_flow_for_an_elicitation_that_ended_is_refused_as_expired() {
    let (fixture, gate, session) = alice().await;
    let asked = fixture.ask(gate.elicitations(), &session, "acme").await;
    let (params, cookie) = started(&gate, &asked, "&code=abc&iss=http%3A%2F%2F127.0.0.1%3A9").await;
    gate.elicitations()
        .finish(&asked, ElicitationStatus::Declined, &Origin::unknown())
        .await
        .expect("finish");
    let outcome = callback(&gate, &session.principal, &params, Some(&cookie)).await;
    assert_eq!(
        outcome,
        CallbackOutcome::Refused {
            refusal: CallbackRefusal::Expired,
            retry: None
        }
    );
}

#[tokio::test]
async fn a_call_waits_for_another_replicas_refresh_and_uses_its_token() {
    let fixture = Fixture::new().await;
    let gate = std::sync::Arc::new(fixture.gate(CONFIG));
    let session = fixture.session("alice").await;
    let alice = session.principal.clone();
    let store = fixture.backing.store.clone();
    let vault = fixture.backing.vault.clone();
    let sealed_access = |token: &str| vault.encrypt_str(token, &access_context(&alice, "acme"));
    let expiring = fixture.connect(&gate, &session, &["read"], Some(Utc::now())).await;
    let refreshable = RefreshedTokens {
        access_token: Some(sealed_access("access-token-1")),
        refresh_token: Some(vault.encrypt_str("refresh-token-1", &refresh_context(&alice, "acme"))),
        expires_at: expiring.expires_at,
        scopes: None,
    };
    store
        .store_refreshed(&alice, "acme", &refreshable)
        .await
        .expect("refreshable");
    // Another replica holds the refresh lease.
    let now = Utc::now();
    let lease = RefreshLease {
        now,
        until: now + chrono::Duration::seconds(20),
    };
    assert!(
        store
            .acquire_refresh_lease(&expiring, lease)
            .await
            .expect("lease")
            .is_some()
    );

    let waiting = tokio::spawn({
        let (gate, alice) = (gate.clone(), alice.clone());
        async move {
            let acme = gate
                .connections()
                .provider("acme")
                .await
                .expect("found")
                .expect("provider");
            gate.connections().grant(&alice, &acme, &[], &Origin::unknown()).await
        }
    });
    // Once the call has read the expiring connection, the other replica's refresh lands and
    // releases the lease. Whether the call then waits for it or takes the released lease, it must
    // use that token: nothing listens at the test provider, so a refresh of its own would fail.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while fixture.cache.get(&alice).is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the call never read the connection"
        );
        tokio::task::yield_now().await;
    }
    let refreshed = RefreshedTokens {
        access_token: Some(sealed_access("access-token-2")),
        refresh_token: None,
        expires_at: Some(now + chrono::Duration::hours(1)),
        scopes: None,
    };
    store
        .store_refreshed(&alice, "acme", &refreshed)
        .await
        .expect("refreshed");
    match waiting.await.expect("join").expect("grant") {
        Grant::Usable { token, .. } => assert_eq!(token.expose(), "access-token-2"),
        Grant::SignIn { .. } => panic!("the refreshed connection is usable"),
    }
}

#[test]
fn callback_params_never_show_their_code_or_state() {
    let params = CallbackParams::from_query("state=the-state-value&code=the-code-value&iss=x").expect("parsed");
    let shown = format!("{params:?}");
    assert!(
        !shown.contains("the-state-value") && !shown.contains("the-code-value"),
        "{shown}"
    );
}
