use super::*;

fn principal(text: &str) -> Principal {
    Principal::parse(text).expect("principal")
}

#[test]
fn every_notice_parses_as_encoded() {
    let elicitation = ElicitationId::generate();
    let notices = [
        Notice::Appended(SessionId::generate()),
        Notice::Changed(SessionId::generate()),
        Notice::ConnectionsChanged(principal("alice@example.com")),
        Notice::ConnectionsChanged(principal("Ada Lovelace")),
        Notice::Answered(elicitation, ClientAction::Accept),
        Notice::Answered(elicitation, ClientAction::Decline),
        Notice::Answered(elicitation, ClientAction::Cancel),
        Notice::Resumed(SessionId::generate(), StreamId::generate()),
        Notice::CatalogueChanged("github".into()),
        Notice::CatalogueChanged("my-notes_2".into()),
        Notice::CallCancelled(SessionId::generate(), "\"a request id with spaces\"".into()),
        Notice::CallCancelled(SessionId::generate(), "7".into()),
        Notice::RelayAnswered(
            SessionId::generate(),
            "gatehouse-relay-1".into(),
            "{\"result\": {\"action\": \"accept\"}}".into(),
        ),
        Notice::ParkedResume("{\"replica\": \"r 1\", \"responses\": {}}".into()),
        Notice::ParkedOutcome("{\"reply\": \"k\", \"outcome\": null}".into()),
    ];
    for notice in notices {
        assert_eq!(Notice::parse(&notice.encode()), Some(notice));
    }
}

#[test]
fn payloads_parse() {
    let id = SessionId::generate();
    assert_eq!(Notice::parse(&format!("e {id}")), Some(Notice::Appended(id.clone())));
    assert_eq!(
        Notice::parse(&format!("e {id} 4")),
        Some(Notice::Appended(id.clone())),
        "earlier versions sent the sequence number too"
    );
    assert_eq!(Notice::parse(&format!("s {id}")), Some(Notice::Changed(id.clone())));
    assert_eq!(
        Notice::parse("c Ada Lovelace"),
        Some(Notice::ConnectionsChanged(principal("Ada Lovelace")))
    );
    let elicitation = ElicitationId::generate();
    assert_eq!(
        Notice::parse(&format!("a {elicitation} decline")),
        Some(Notice::Answered(elicitation, ClientAction::Decline))
    );
    assert_eq!(Notice::parse(&format!("a {elicitation} maybe")), None);
    assert_eq!(Notice::parse("a not-an-id accept"), None);
    let stream = StreamId::generate();
    assert_eq!(
        Notice::parse(&format!("r {id} {stream}")),
        Some(Notice::Resumed(id.clone(), stream))
    );
    assert_eq!(Notice::parse(&format!("r {id}")), None, "a resume names its stream");
    assert_eq!(Notice::parse(&format!("r {id} not-a-stream")), None);
    assert_eq!(
        Notice::parse("t linear"),
        Some(Notice::CatalogueChanged("linear".into()))
    );
    assert_eq!(
        Notice::parse("t Team-MCP_1"),
        Some(Notice::CatalogueChanged("Team-MCP_1".into()))
    );
    assert_eq!(Notice::parse("t "), None, "a catalogue notice names its upstream");
    assert_eq!(Notice::parse("t two words"), None, "an upstream id is an identifier");
    assert_eq!(Notice::parse("t caf\u{e9}"), None);
    assert_eq!(
        Notice::parse("x y"),
        None,
        "a cancellation names a session and a request"
    );
    assert_eq!(Notice::parse(&format!("x {id}")), None);
    assert_eq!(
        Notice::parse(&format!("y {id} relay")),
        None,
        "an answer carries the answer"
    );
    assert_eq!(Notice::parse("e not-an-id 1"), None);
    assert_eq!(Notice::parse("e"), None);
    assert_eq!(Notice::parse(""), None);
}

#[test]
fn sql_twins_use_the_encoders_kinds() {
    let id = SessionId::generate();
    // What PostgreSQL makes of `'e ' || column`: the text before the column, then its value.
    let in_sql = |expression: String, value: &str| {
        let prefix = expression
            .strip_suffix(" || column")
            .and_then(|quoted| quoted.strip_prefix('\''))
            .and_then(|quoted| quoted.strip_suffix('\''))
            .expect("a quoted prefix and the column");
        format!("{prefix}{value}")
    };
    assert_eq!(
        in_sql(Notice::appended_sql("column"), id.as_str()),
        Notice::Appended(id.clone()).encode()
    );
    assert_eq!(
        in_sql(Notice::changed_sql("column"), id.as_str()),
        Notice::Changed(id.clone()).encode()
    );
    let alice = principal("Ada Lovelace");
    assert_eq!(
        in_sql(Notice::connections_changed_sql("column"), alice.as_str()),
        Notice::ConnectionsChanged(alice.clone()).encode()
    );
    assert_eq!(
        in_sql(Notice::catalogue_changed_sql("column"), "search"),
        Notice::CatalogueChanged("search".to_owned()).encode()
    );
}
