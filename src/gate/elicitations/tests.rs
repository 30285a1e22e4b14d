use super::*;
use crate::gate::testing::{Fixture, ask, principal};

#[tokio::test]
async fn a_pending_elicitation_is_reused_until_it_ends() {
    let fixture = Fixture::new().await;
    let session = fixture.session("alice").await;
    let elicitations = fixture.elicitations();
    let first = fixture.ask(&elicitations, &session, "acme").await;
    assert_eq!(first.status, ElicitationStatus::Pending);
    assert_eq!(first.url, format!("http://127.0.0.1:8080/connect/{}", first.id));
    assert_eq!(first.client_name, "Test Client");
    let again = fixture.ask(&elicitations, &session, "acme").await;
    assert_eq!(again.id, first.id, "reused while pending");
    let form = fixture.ask(&elicitations, &session, "form:key").await;
    assert_ne!(form.id, first.id);
    assert!(form.url.ends_with(&format!("/forms/{}", form.id)));

    assert!(
        elicitations
            .finish(&first, ElicitationStatus::Failed, &Origin::unknown())
            .await
            .expect("finish")
    );
    assert!(
        !elicitations
            .finish(&first, ElicitationStatus::Declined, &Origin::unknown())
            .await
            .expect("finish"),
        "finishing twice changes nothing"
    );
    let next = fixture.ask(&elicitations, &session, "acme").await;
    assert_ne!(next.id, first.id, "a new one once the old one ended");
}

#[tokio::test]
async fn creations_beyond_the_rate_are_refused_and_reuses_are_not_counted() {
    let fixture = Fixture::new().await;
    let session = fixture.session("alice").await;
    let limits = Limits {
        ttl: Duration::from_secs(600),
        max_pending: 32,
        per_minute: 2,
    };
    let elicitations = Elicitations::new(fixture.backing.clone(), limits);
    let first = fixture.ask(&elicitations, &session, "acme").await;
    for _ in 0..5 {
        assert_eq!(fixture.ask(&elicitations, &session, "acme").await.id, first.id);
    }
    fixture.ask(&elicitations, &session, "form:key").await;
    let refused = elicitations
        .ask(&principal("alice"), &session, &ask("form:other"), &Origin::unknown())
        .await
        .map(|(asked, _)| asked)
        .expect_err("a third creation within the minute");
    assert!(
        matches!(refused, GateError::TooManyCreated { per_minute: 2, retry_after } if (1..=30).contains(&retry_after)),
        "{refused:?}"
    );
    let bob = fixture.session("bob").await;
    fixture.ask(&elicitations, &bob, "acme").await;
}

#[tokio::test]
async fn finishing_appends_the_completion_and_wakes_the_session() {
    let fixture = Fixture::new().await;
    let session = fixture.session("alice").await;
    let elicitations = fixture.elicitations();
    let elicitation = fixture.ask(&elicitations, &session, "acme").await;
    let mut wake = fixture.backing.bus.subscribe(&session.id);
    assert!(
        elicitations
            .finish(&elicitation, ElicitationStatus::Declined, &Origin::unknown())
            .await
            .expect("finish")
    );
    assert!(wake.has_changed().expect("open"), "the session's streams were woken");
    wake.borrow_and_update();
    let events = fixture.events(&session).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].message["method"], "notifications/elicitation/complete");
    assert_eq!(events[0].message["params"]["elicitationId"], elicitation.id.to_string());
    assert!(
        !elicitations
            .finish(&elicitation, ElicitationStatus::Declined, &Origin::unknown())
            .await
            .expect("finish")
    );
    assert!(!wake.has_changed().expect("open"), "a second finish wakes nobody");
}

#[tokio::test]
async fn a_decline_is_reported_once() {
    let fixture = Fixture::new().await;
    let session = fixture.session("alice").await;
    let elicitations = fixture.elicitations();
    let asked = ask("acme");
    let elicitation = elicitations
        .ask(&principal("alice"), &session, &asked, &Origin::unknown())
        .await
        .expect("ask")
        .0;
    elicitations
        .finish(&elicitation, ElicitationStatus::Declined, &Origin::unknown())
        .await
        .expect("finish");
    let declined = elicitations
        .take_unreported_decline(&principal("alice"), &session, &asked)
        .await
        .expect("take");
    assert_eq!(declined.map(|e| e.id), Some(elicitation.id));
    assert!(
        elicitations
            .take_unreported_decline(&principal("alice"), &session, &asked)
            .await
            .expect("take")
            .is_none()
    );
}

#[tokio::test]
async fn overdue_elicitations_expire() {
    let fixture = Fixture::new().await;
    let session = fixture.session("alice").await;
    let elicitations = fixture.elicitations();
    let elicitation = fixture.ask(&elicitations, &session, "acme").await;
    let later = Utc::now() + chrono::Duration::hours(1);
    assert_eq!(elicitations.expire_overdue(later).await.expect("sweep").len(), 1);
    let stored = elicitations.get(&elicitation.id).await.expect("get").expect("stored");
    assert_eq!(stored.status, ElicitationStatus::Expired);
}
