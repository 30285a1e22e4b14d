//! Unit tests of the bus's local fan-out: wake-ups, answers, stream places and resumes.

use super::*;

#[tokio::test]
async fn every_waiter_on_an_elicitation_gets_the_answer() {
    let hub = Arc::new(Hub::new(
        Arc::new(SessionCache::new(4)),
        Arc::new(ConnectionCache::new(4)),
        true,
    ));
    let elicitation = ElicitationId::generate();
    let mut first = hub.await_answer(elicitation);
    let mut second = hub.await_answer(elicitation);
    hub.notify(&Notice::Answered(elicitation, ClientAction::Accept));
    assert_eq!(first.recv().await, Some(ClientAction::Accept));
    assert_eq!(second.recv().await, Some(ClientAction::Accept));
    drop(first);
    hub.notify(&Notice::Answered(elicitation, ClientAction::Decline));
    assert_eq!(
        second.recv().await,
        Some(ClientAction::Decline),
        "the other waiter stays"
    );
    drop(second);
    assert!(hub.answers.lock().expect("lock").is_empty(), "nothing left behind");
}

#[test]
fn stream_slots_are_counted_per_session_and_freed_on_drop() {
    let hub = Arc::new(Hub::new(
        Arc::new(SessionCache::new(4)),
        Arc::new(ConnectionCache::new(4)),
        true,
    ));
    let (a, b) = (SessionId::generate(), SessionId::generate());
    let first = hub.claim_stream(&a, 2, false).expect("first");
    let _second = hub.claim_stream(&a, 2, false).expect("second");
    assert!(hub.claim_stream(&a, 2, false).is_none(), "the limit is reached");
    assert!(
        hub.claim_stream(&b, 2, false).is_some(),
        "another session has its own count"
    );
    drop(first);
    let _third = hub.claim_stream(&a, 2, false).expect("a dropped slot is free again");
    assert!(hub.claim_stream(&a, 2, false).is_none());
}

#[test]
fn a_resumed_stream_replaces_the_older_ones_here_and_elsewhere() {
    let hub = Arc::new(Hub::new(
        Arc::new(SessionCache::new(4)),
        Arc::new(ConnectionCache::new(4)),
        false,
    ));
    let (a, b) = (SessionId::generate(), SessionId::generate());
    let older = [
        hub.claim_stream(&a, 2, false).expect("first"),
        hub.claim_stream(&a, 2, false).expect("second"),
    ];
    let other_session = hub.claim_stream(&b, 2, false).expect("b");
    let resumed = hub
        .claim_stream(&a, 2, true)
        .expect("a resume replaces, so it has room");
    assert!(older.iter().all(StreamSlot::is_ended), "the older streams here end");
    assert!(!resumed.is_ended() && !other_session.is_ended());
    let plain = hub
        .claim_stream(&a, 2, false)
        .expect("the ended ones gave up their places");

    // Another replica's resume, sent before this one's came back: this one was concurrent, stays.
    hub.notify(&Notice::Resumed(a.clone(), StreamId::generate()));
    assert!(!resumed.is_ended(), "a resume whose own notice is still to come stays");
    assert!(plain.is_ended(), "a plain stream is older than any resume it hears of");
    // Its own notice came back: a resume elsewhere is newer from now on.
    hub.notify(&Notice::Resumed(a.clone(), resumed.id));
    assert!(!resumed.is_ended());
    hub.notify(&Notice::Resumed(a.clone(), StreamId::generate()));
    assert!(resumed.is_ended(), "replaced by a newer resume on another replica");
    assert!(!other_session.is_ended(), "other sessions are not touched");
    assert!(
        !hub.streams.lock().expect("lock").contains_key(&a),
        "nothing left behind"
    );
}

#[tokio::test]
async fn notify_wakes_only_that_sessions_streams() {
    let hub = Hub::new(
        Arc::new(SessionCache::new(10)),
        Arc::new(ConnectionCache::new(10)),
        true,
    );
    let (a, b) = (SessionId::generate(), SessionId::generate());
    let mut rx_a = hub.subscribe(&a);
    let rx_b = hub.subscribe(&b);
    hub.notify(&Notice::Appended(a.clone()));
    assert!(rx_a.has_changed().expect("open"));
    assert!(!rx_b.has_changed().expect("open"));
    rx_a.borrow_and_update();
    hub.resync();
    assert!(rx_a.has_changed().expect("open") && rx_b.has_changed().expect("open"));
    assert_eq!(hub.sessions_with_streams().len(), 2);
    drop(rx_b);
    assert_eq!(hub.sessions_with_streams(), vec![a]);
}

#[test]
fn catalogue_changes_reach_every_subscriber_and_a_gap_asks_for_a_full_reload() {
    let hub = Hub::new(Arc::new(SessionCache::new(4)), Arc::new(ConnectionCache::new(4)), false);
    hub.notify(&Notice::CatalogueChanged("unheard".into()));
    let (mut first, mut second) = (hub.catalogues.subscribe(), hub.catalogues.subscribe());
    hub.notify(&Notice::CatalogueChanged("github".into()));
    hub.notify(&Notice::Appended(SessionId::generate()));
    hub.resync();
    for receiver in [&mut first, &mut second] {
        assert_eq!(receiver.try_recv().ok().as_deref(), Some("github"));
        assert_eq!(
            receiver.try_recv().ok().as_deref(),
            Some(EVERY_UPSTREAM),
            "after a reconnection, every catalogue is reloaded"
        );
        assert!(
            receiver.try_recv().is_err(),
            "nothing else, nothing from before subscribing"
        );
    }

    for n in 0..=CATALOGUE_QUEUE {
        hub.notify(&Notice::CatalogueChanged(format!("upstream-{n}")));
    }
    assert!(
        matches!(first.try_recv(), Err(broadcast::error::TryRecvError::Lagged(1))),
        "a subscriber too far behind is told so, and reloads everything"
    );
}
