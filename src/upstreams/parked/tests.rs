use std::time::Duration;

use serde_json::json;

use super::*;

fn principal(name: &str) -> Principal {
    Principal::parse(name).expect("principal")
}

fn calls() -> Arc<ParkedCalls> {
    Arc::new(ParkedCalls::new("replica-a".to_owned()))
}

#[tokio::test]
async fn a_call_never_retried_ends_at_its_deadline_and_gives_its_place_back() {
    let calls = calls();
    let alice = principal("alice");
    let deadline = Instant::now() + Duration::from_millis(50);
    let mut slot = calls.park(&alice, deadline).expect("a place");
    let id = slot.id().to_owned();
    assert_eq!(calls.parked_now(), 1);
    assert!(slot.wait().await.is_none(), "no retry came");
    assert!(Instant::now() >= deadline, "it waited until the deadline");
    drop(slot);
    assert_eq!(calls.parked_now(), 0);
    assert!(calls.lock().by_principal.is_empty(), "nobody parked, nobody kept");
    assert!(
        calls.resume(&id, &alice, Map::new()).await.is_none(),
        "a late retry finds nothing"
    );
}

#[tokio::test]
async fn parked_calls_end_at_once_when_the_replica_shuts_down() {
    let calls = calls();
    let alice = principal("alice");
    let mut slot = calls
        .park(&alice, Instant::now() + Duration::from_secs(3600))
        .expect("a place");
    calls.stop();
    assert!(slot.wait().await.is_none(), "ended without waiting for the deadline");
    drop(slot);
    assert_eq!(calls.parked_now(), 0);
}

#[tokio::test]
async fn a_retry_hands_its_answers_to_its_own_call_only() {
    let calls = calls();
    let alice = principal("alice");
    let mut slot = calls
        .park(&alice, Instant::now() + Duration::from_secs(60))
        .expect("a place");
    let id = slot.id().to_owned();
    assert!(
        calls.resume(&id, &principal("mallory"), Map::new()).await.is_none(),
        "another principal cannot resume it"
    );
    let waiting = tokio::spawn(async move {
        let resume = slot.wait().await.expect("the retry's answers");
        assert_eq!(resume.responses.get("k"), Some(&json!({"action": "decline"})));
        let _ = resume.reply.send(ToolOutcome::Done(ToolResult::text("done")));
    });
    let responses = json!({"k": {"action": "decline"}})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let outcome = calls.resume(&id, &alice, responses).await;
    assert!(matches!(outcome, Some(ToolOutcome::Done(result)) if result == ToolResult::text("done")));
    waiting.await.expect("the parked side ran");
    assert_eq!(calls.parked_now(), 0);
    assert!(calls.resume(&id, &alice, Map::new()).await.is_none(), "taken once");
}

#[test]
fn a_principal_parks_at_most_its_share_and_others_keep_theirs() {
    let calls = calls();
    let deadline = Instant::now() + Duration::from_secs(60);
    let alice = principal("alice");
    let slots: Vec<Slot> = (0..MAX_PARKED_PER_PRINCIPAL + 1)
        .map_while(|_| calls.park(&alice, deadline))
        .collect();
    assert_eq!(slots.len(), MAX_PARKED_PER_PRINCIPAL);
    let bobs = calls.park(&principal("bob"), deadline).expect("bob still has his");
    drop(slots);
    assert!(
        calls.park(&alice, deadline).is_some(),
        "places given back are alice's again"
    );
    drop(bobs);
    assert_eq!(calls.parked_now(), 0);
}

#[test]
fn outcomes_cross_the_bus_unchanged() {
    let requests = json!({"p1": {"method": "roots/list", "params": {}}});
    let outcomes = [
        ToolOutcome::Done(ToolResult::error("no")),
        ToolOutcome::CredentialRejected { provider: "gh".into() },
        ToolOutcome::ScopesMissing {
            provider: "gh".into(),
            scopes: vec!["repo".into()],
        },
        ToolOutcome::UrlElicitations(vec![json!({"url": "https://x.example"})]),
        ToolOutcome::InputRequired {
            requests: requests.as_object().cloned().unwrap_or_default(),
            state: ParkedRef {
                replica: "r".into(),
                id: "i".into(),
            }
            .to_state(),
        },
    ];
    for outcome in outcomes {
        let encoded = encode(&outcome);
        let decoded = decode(&encoded).expect("decodes");
        assert_eq!(encode(&decoded), encoded);
    }
    assert!(decode(&Value::Null).is_none(), "no outcome: the call is gone");
    let state = ParkedRef {
        replica: "r".into(),
        id: "i".into(),
    };
    assert_eq!(ParkedRef::from_state(&state.to_state()), Some(state));
    assert_eq!(ParkedRef::from_state(&json!({"round": 2})), None);
}
