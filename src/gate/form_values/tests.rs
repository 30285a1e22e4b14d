//! Unit tests of saved form values on an in-memory store: sealing, blank secrets keeping the
//! stored one, call answers taken once by the call that asked, completion once.

use super::*;
use crate::gate::testing::{CONFIG, Fixture, alice, ask, principal, stored, submission};
use crate::gate::{Ask, Gate, call_key};
use crate::store::ElicitationStatus;

fn form<'g>(gate: &'g Gate, id: &str) -> &'g Form {
    gate.form_values().forms().get(id).expect("configured form")
}

#[tokio::test]
async fn user_values_are_sealed_kept_and_blank_secrets_keep_the_stored_one() {
    let fixture = Fixture::new().await;
    let gate = fixture.gate(CONFIG);
    let values = gate.form_values();
    let alice = principal("alice");
    let key = form(&gate, "key");
    let first = submission(json!({"org": "acme"}), &[("api_key", "sk-first-secret-value")]);
    assert!(
        !values
            .save_user(&alice, key, first, None, &Origin::unknown())
            .await
            .expect("save")
    );
    let stored = fixture
        .backing
        .store
        .form_values(&alice, "key")
        .await
        .expect("row")
        .expect("saved");
    let sealed = stored.secrets.expect("sealed secrets");
    assert!(
        !String::from_utf8_lossy(&sealed).contains("sk-first"),
        "the secret is not stored in clear"
    );
    assert!(!stored.fields.to_string().contains("sk-first"));

    values
        .save_user(
            &alice,
            key,
            submission(json!({"org": "personal"}), &[]),
            None,
            &Origin::unknown(),
        )
        .await
        .expect("replace");
    let used = values.user_values(&alice, "key").await.expect("values").expect("saved");
    assert_eq!(used.values["org"], "personal");
    assert_eq!(used.secrets["api_key"].expose(), "sk-first-secret-value");
    let shown = values.stored(&alice, "key").await.expect("stored").expect("saved");
    assert_eq!(shown.secret_names, BTreeSet::from(["api_key".to_owned()]));
    assert_eq!(values.all_stored(&alice).await.expect("all").len(), 1);
    assert!(values.stored(&principal("bob"), "key").await.expect("stored").is_none());

    assert!(values.delete(&alice, "key", &Origin::unknown()).await.expect("delete"));
    assert!(!values.delete(&alice, "key", &Origin::unknown()).await.expect("delete"));
    assert!(values.user_values(&alice, "key").await.expect("values").is_none());
}

#[tokio::test]
async fn a_call_answer_is_taken_once_by_the_call_that_asked() {
    let (_fixture, gate, session) = alice().await;
    let alice = principal("alice");
    let key = call_key("pay", json!({"amount": 12}).as_object().expect("object"));
    let ask = Ask {
        call_key: Some(key.clone()),
        ..ask("form:confirm")
    };
    let elicitation = gate
        .elicitations()
        .ask(&alice, &session, &ask, &Origin::unknown())
        .await
        .expect("ask")
        .0;
    let answer = submission(json!({"note": "ok"}), &[("pin", "1234")]);
    assert!(
        gate.form_values()
            .answer_call(&elicitation, answer, &Origin::unknown())
            .await
            .expect("answer")
    );
    let other = call_key("pay", json!({"amount": 13}).as_object().expect("object"));
    let values = gate.form_values();
    assert!(
        values
            .take_call_answer(&alice, &session.id, "confirm", &other)
            .await
            .expect("take")
            .is_none(),
        "another call's arguments find nothing"
    );
    let taken = values
        .take_call_answer(&alice, &session.id, "confirm", &key)
        .await
        .expect("take")
        .expect("the answer");
    assert_eq!(taken.values["note"], "ok");
    assert_eq!(taken.secrets["pin"].expose(), "1234");
    assert!(
        values
            .take_call_answer(&alice, &session.id, "confirm", &key)
            .await
            .expect("take")
            .is_none(),
        "taken once"
    );
    let done = stored(&gate, &elicitation).await;
    assert_eq!(done.status, ElicitationStatus::Completed);
    let late = submission(json!({"note": "again"}), &[]);
    assert!(
        !gate
            .form_values()
            .answer_call(&done, late, &Origin::unknown())
            .await
            .expect("answer"),
        "a finished elicitation takes no second answer"
    );
}

#[tokio::test]
async fn saving_for_an_elicitation_completes_it_once() {
    let (fixture, gate, session) = alice().await;
    let alice = principal("alice");
    let elicitation = fixture.ask(gate.elicitations(), &session, "form:key").await;
    assert_eq!(
        gate.form_values().form_of(&elicitation).map(|f| f.id.as_str()),
        Some("key")
    );
    let key = form(&gate, "key");
    let values = submission(json!({"org": "acme"}), &[("api_key", "sk-0123456789abcdef0123")]);
    assert!(
        gate.form_values()
            .save_user(&alice, key, values.clone(), Some(&elicitation), &Origin::unknown())
            .await
            .expect("save")
    );
    assert!(
        !gate
            .form_values()
            .save_user(&alice, key, values, Some(&elicitation), &Origin::unknown())
            .await
            .expect("save"),
        "the elicitation is no longer pending"
    );
    let events = fixture.events(&session).await;
    assert_eq!(events.len(), 1, "one completion notification");
}
