//! Approval requests bound to the caller and the call, on an in-memory store: found and taken from
//! another session, only by the same OAuth client, run with the stored arguments; one decision,
//! with no vote stored after it; calls too large to show refused before anything is asked.

use serde_json::json;

use super::*;
use crate::gate::testing::{Fixture, alice, principal};
use crate::gate::{Decision, Gate, ToolCall};
use crate::store::{SessionRecord, Window};

static NOWHERE: Origin = Origin::unknown();

/// `session`'s call of `pay` (which needs `approval:payments`) through OAuth client `client`.
async fn decide(
    gate: &Gate,
    session: &SessionRecord,
    arguments: &Map<String, Value>,
    client: Option<&str>,
) -> Decision {
    let requires = [Requirement::parse("approval:payments").expect("requirement")];
    let details = Default::default();
    let call = ToolCall {
        tool: "pay",
        requires: &requires,
        arguments,
        client,
        details: &details,
        from: &NOWHERE,
    };
    gate.decide(&session.principal, session, &call).await.expect("decision")
}

fn asked(decision: Decision) -> ElicitationRecord {
    match decision {
        Decision::Elicit(mut asked) if asked.len() == 1 => asked.remove(0),
        other => panic!("expected one request, got {other:?}"),
    }
}

fn arguments(value: Value) -> Map<String, Value> {
    value.as_object().cloned().expect("an object")
}

fn approver(name: &str) -> (Principal, Claims) {
    let who = principal(name);
    let claims = Claims::default().with_principal(&who);
    (who, claims)
}

async fn vote(gate: &Gate, request: &ElicitationRecord, name: &str, approve: bool) -> Result<Voted, VoteRefusal> {
    let (who, claims) = approver(name);
    gate.approvals()
        .vote(request, &who, &claims, approve, "", &NOWHERE)
        .await
        .expect("vote")
}

#[tokio::test]
async fn a_decision_is_found_from_another_session_and_the_tool_runs_with_the_stored_arguments() {
    let (fixture, gate, first) = alice().await;
    let call = arguments(json!({"amount": 1, "payee": "bob"}));
    let request = asked(decide(&gate, &first, &call, Some("client-a")).await);
    // The client restarted: a new session asks for the same call, and finds the same request.
    let second = fixture.session("alice").await;
    let again = asked(decide(&gate, &second, &call, Some("client-a")).await);
    assert_eq!(again.id, request.id);
    assert!(matches!(vote(&gate, &request, "bob", true).await, Ok(Voted::Decided)));

    // Another OAuth client of alice's is another caller: it neither finds nor takes the decision.
    let other = asked(decide(&gate, &second, &call, Some("client-b")).await);
    assert_ne!(other.id, request.id);

    // The same call written otherwise is the same call (JCS); it runs from the stored arguments.
    let written_otherwise: Value = serde_json::from_str(r#"{"payee":"bob","amount":1.0}"#).expect("json");
    let third = fixture.session("alice").await;
    match decide(&gate, &third, &arguments(written_otherwise), Some("client-a")).await {
        Decision::Run(credentials) => assert_eq!(credentials.approved_arguments(), Some(&call)),
        other => panic!("expected to run, got {other:?}"),
    }
    // Used once.
    let fourth = asked(decide(&gate, &third, &call, Some("client-a")).await);
    assert_ne!(fourth.id, request.id);
}

#[tokio::test]
async fn a_vote_arriving_after_the_decision_is_refused_and_not_stored() {
    let (_fixture, gate, session) = alice().await;
    let call = arguments(json!({"amount": 1}));
    // carol's page was loaded while the request waited: she holds it as it was then.
    let seen_by_carol = asked(decide(&gate, &session, &call, None).await);
    assert!(matches!(
        vote(&gate, &seen_by_carol, "bob", true).await,
        Ok(Voted::Decided)
    ));
    assert_eq!(
        vote(&gate, &seen_by_carol, "carol", false).await.err(),
        Some(VoteRefusal::NotWaiting)
    );
    let now = gate
        .elicitations()
        .get(&seen_by_carol.id)
        .await
        .expect("get")
        .expect("stored");
    let votes = gate.approvals().votes(&now).await.expect("votes");
    assert_eq!(votes.len(), 1, "{votes:?}");
    assert!(votes[0].approve);
    assert_eq!(Approvals::standing(&now, &votes), Standing::Approved);
    assert!(matches!(decide(&gate, &session, &call, None).await, Decision::Run(_)));
}

#[tokio::test]
async fn a_denial_decides_once_and_is_shown_as_the_decision() {
    let (_fixture, gate, session) = alice().await;
    let request = asked(decide(&gate, &session, &arguments(json!({"amount": 2})), None).await);
    assert!(matches!(
        vote(&gate, &request, "carol", false).await,
        Ok(Voted::Decided)
    ));
    assert_eq!(
        vote(&gate, &request, "bob", true).await.err(),
        Some(VoteRefusal::NotWaiting)
    );
    let now = gate
        .elicitations()
        .get(&request.id)
        .await
        .expect("get")
        .expect("stored");
    let votes = gate.approvals().votes(&now).await.expect("votes");
    assert_eq!(votes.len(), 1, "{votes:?}");
    assert_eq!(Approvals::standing(&now, &votes), Standing::Denied);
}

#[tokio::test]
async fn arguments_too_large_to_show_are_refused_before_any_request_exists() {
    let fixture = Fixture::new().await;
    let gate = fixture.gate(crate::gate::testing::CONFIG);
    let session = fixture.session("alice").await;
    let call = arguments(json!({"amount": 1, "memo": "x".repeat(1100), "payee": "MALLORY"}));
    match decide(&gate, &session, &call, None).await {
        Decision::Denied(text) => assert!(text.contains("max_argument_bytes") && text.contains("1024"), "{text}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let stored = fixture
        .backing
        .store
        .list_elicitations(false, Window::first(10))
        .await
        .expect("list");
    assert!(stored.is_empty(), "{stored:?}");
}
