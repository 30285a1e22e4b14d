//! Every branch of the decision, on an in-memory store: met, missing, broken, scope step-up,
//! declined once, user- and call-scoped forms.

use serde_json::json;

use super::*;
use crate::gate::testing::{alice, submission};
use crate::store::ElicitationStatus;

/// Calls from nowhere in particular.
static NOWHERE: Origin = Origin::unknown();

struct Call {
    requires: Vec<Requirement>,
    arguments: Map<String, Value>,
    details: HashMap<String, String>,
}

impl Call {
    fn new(requires: &[&str], arguments: Value) -> Self {
        let Value::Object(arguments) = arguments else {
            panic!("arguments are an object")
        };
        Self {
            requires: requires
                .iter()
                .map(|r| Requirement::parse(r).expect("requirement"))
                .collect(),
            arguments,
            details: HashMap::from([("confirm".to_owned(), "Pay 12 EUR?".to_owned())]),
        }
    }

    fn site(&self) -> ToolCall<'_> {
        ToolCall {
            tool: "pay",
            requires: &self.requires,
            arguments: &self.arguments,
            client: None,
            details: &self.details,
            from: &NOWHERE,
        }
    }
}

async fn decide(gate: &Gate, session: &SessionRecord, call: &Call) -> Decision {
    gate.decide(&session.principal, session, &call.site())
        .await
        .expect("decision")
}

fn elicited(decision: Decision) -> Vec<ElicitationRecord> {
    match decision {
        Decision::Elicit(elicitations) => elicitations,
        other => panic!("expected elicitations, got {other:?}"),
    }
}

fn credentials(decision: Decision) -> Credentials {
    match decision {
        Decision::Run(credentials) => credentials,
        other => panic!("expected to run, got {other:?}"),
    }
}

fn requirements(elicitations: &[ElicitationRecord]) -> Vec<&str> {
    elicitations.iter().map(|e| e.requirement.as_str()).collect()
}

async fn save_key(gate: &Gate, session: &SessionRecord) {
    let form = gate.form_values().forms().get("key").expect("form");
    let submission = submission(json!({"org": "acme"}), &[("api_key", "sk-123456")]);
    gate.form_values()
        .save_user(&session.principal, form, submission, None, &Origin::unknown())
        .await
        .expect("save");
}

/// The user confirms the call-scoped form `asked` is for, with nothing typed in.
async fn answer(gate: &Gate, asked: &ElicitationRecord) {
    let answered = gate
        .form_values()
        .answer_call(asked, submission(json!({}), &[]), &Origin::unknown())
        .await
        .expect("answer");
    assert!(answered);
}

#[tokio::test]
async fn nothing_required_runs() {
    let (_fixture, gate, session) = alice().await;
    let run = credentials(decide(&gate, &session, &Call::new(&[], json!({}))).await);
    assert_eq!(run.secrets().count(), 0);
}

#[tokio::test]
async fn everything_missing_is_asked_for_at_once_and_reused() {
    let (_fixture, gate, session) = alice().await;
    let call = Call::new(&["acme", "form:key"], json!({}));
    let first = elicited(decide(&gate, &session, &call).await);
    assert_eq!(requirements(&first), ["acme:read", "form:key"]);
    assert_eq!(
        first[0].message,
        "Authorization is required to access your ACME account (read)."
    );
    assert_eq!(first[1].message, "Please fill in \"ACME API key\" in your browser.");
    let again = elicited(decide(&gate, &session, &call).await);
    assert_eq!(
        again.iter().map(|e| e.id).collect::<Vec<_>>(),
        first.iter().map(|e| e.id).collect::<Vec<_>>(),
        "pending elicitations are reused"
    );
}

#[tokio::test]
async fn met_requirements_run_with_their_credentials() {
    let (fixture, gate, session) = alice().await;
    fixture.connect(&gate, &session, &["read"], None).await;
    save_key(&gate, &session).await;
    let run = credentials(decide(&gate, &session, &Call::new(&["acme", "form:key"], json!({}))).await);
    assert_eq!(run.token("acme").map(|t| t.expose().as_str()), Some("access-token-1"));
    assert_eq!(run.forms()["key"].values["org"], "acme");
    let mut secrets: Vec<&str> = run.secrets().collect();
    secrets.sort_unstable();
    assert_eq!(secrets, ["access-token-1", "sk-123456"]);
}

#[tokio::test]
async fn a_broken_connection_asks_for_a_new_sign_in_and_a_rejected_token_breaks_it() {
    let (fixture, gate, session) = alice().await;
    fixture.connect(&gate, &session, &["read"], None).await;
    let call = Call::new(&["acme"], json!({}));
    let run = credentials(decide(&gate, &session, &call).await);
    gate.credential_rejected(&session.principal, "acme", &run, &Origin::unknown())
        .await
        .expect("rejected");
    let asked = elicited(decide(&gate, &session, &call).await);
    assert_eq!(requirements(&asked), ["acme:read"]);
}

#[tokio::test]
async fn more_scopes_than_granted_ask_for_the_union() {
    let (fixture, gate, session) = alice().await;
    fixture.connect(&gate, &session, &["read", "profile"], None).await;
    let asked = elicited(decide(&gate, &session, &Call::new(&["acme:write"], json!({}))).await);
    assert_eq!(requirements(&asked), ["acme:profile read write"]);
}

#[tokio::test]
async fn a_decline_is_reported_once_then_asked_afresh() {
    let (_fixture, gate, session) = alice().await;
    let call = Call::new(&["acme"], json!({}));
    let asked = elicited(decide(&gate, &session, &call).await);
    gate.elicitations()
        .finish(&asked[0], ElicitationStatus::Declined, &Origin::unknown())
        .await
        .expect("decline");
    match decide(&gate, &session, &call).await {
        Decision::Declined(declined) => assert_eq!(declined.id, asked[0].id),
        other => panic!("expected the decline, got {other:?}"),
    }
    let afresh = elicited(decide(&gate, &session, &call).await);
    assert_ne!(afresh[0].id, asked[0].id);
}

#[tokio::test]
async fn a_saved_user_form_is_reused_by_every_call() {
    let (_fixture, gate, session) = alice().await;
    save_key(&gate, &session).await;
    for amount in [1, 2] {
        let run = credentials(decide(&gate, &session, &Call::new(&["form:key"], json!({ "amount": amount }))).await);
        assert_eq!(run.forms()["key"].secrets["api_key"].expose(), "sk-123456");
    }
}

#[tokio::test]
async fn a_call_scoped_answer_serves_only_the_call_that_asked_and_only_once() {
    let (_fixture, gate, session) = alice().await;
    let call = Call::new(&["form:confirm"], json!({"amount": 12}));
    let asked = elicited(decide(&gate, &session, &call).await);
    assert_eq!(asked[0].detail.as_deref(), Some("Pay 12 EUR?"));
    assert_eq!(asked[0].message, "Please confirm in your browser: Confirm payment.");
    answer(&gate, &asked[0]).await;

    let other = Call::new(&["form:confirm"], json!({"amount": 13}));
    let asked_other = elicited(decide(&gate, &session, &other).await);
    assert_ne!(asked_other[0].id, asked[0].id, "other arguments are another call");
    credentials(decide(&gate, &session, &call).await);
    let again = elicited(decide(&gate, &session, &call).await);
    assert_ne!(again[0].id, asked[0].id, "the answer was used up");
}

#[tokio::test]
async fn a_call_scoped_answer_waits_until_nothing_else_is_missing() {
    let (_fixture, gate, session) = alice().await;
    let call = Call::new(&["form:key", "form:confirm"], json!({"amount": 12}));
    let asked = elicited(decide(&gate, &session, &call).await);
    assert_eq!(requirements(&asked), ["form:key"], "the user form first");
    save_key(&gate, &session).await;
    let asked = elicited(decide(&gate, &session, &call).await);
    assert_eq!(requirements(&asked), ["form:confirm"]);
    answer(&gate, &asked[0]).await;
    let run = credentials(decide(&gate, &session, &call).await);
    assert!(run.forms().contains_key("key") && run.forms().contains_key("confirm"));
}
