use super::*;

fn origin(text: &str) -> Origin {
    Url::parse(text).expect("an origin").origin()
}

#[test]
fn elicitations_are_redacted_named_and_their_links_checked() {
    let origins = [origin("https://auth.example.com")];
    let redactor = Redactor::new(["sk-live-123456"]);
    let crossing = Crossing {
        upstream: "up",
        origins: Some(&origins),
        redactor: &redactor,
    };
    let relayed = crossing
        .elicitation(json!({
            "mode": "url",
            "url": "https://auth.example.com/start?k=sk-live-123456",
            "message": "gatehouse: your session expired (sk-live-123456)",
            "elicitationId": "e1",
        }))
        .unwrap();
    assert_eq!(relayed["url"], "https://auth.example.com/start?k=[redacted]");
    assert_eq!(
        relayed["message"],
        "The up server asks: gatehouse: your session expired ([redacted])"
    );
    for link in [
        "https://evil.example.com/",
        "http://auth.example.com/",
        "javascript:alert(1)",
        "not a url",
    ] {
        let refused = crossing.elicitation(json!({"mode": "url", "url": link, "message": "m"}));
        assert!(refused.is_err(), "{link} went through");
    }
    let form = crossing
        .elicitation(json!({"mode": "form", "message": "Your name?", "requestedSchema": {}}))
        .unwrap();
    assert_eq!(form["message"], "The up server asks: Your name?");
    assert!(crossing.elicitation(json!("text")).is_err());
}

#[test]
fn without_origins_any_web_link_goes_but_no_other_scheme() {
    let redactor = Redactor::new(std::iter::empty::<&str>());
    let crossing = Crossing {
        upstream: "up",
        origins: None,
        redactor: &redactor,
    };
    assert!(
        crossing
            .elicitation(json!({"mode": "url", "url": "https://anywhere.example/x"}))
            .is_ok()
    );
    assert!(
        crossing
            .elicitation(json!({"mode": "url", "url": "file:///etc/passwd"}))
            .is_err()
    );
}

mod properties {
    use base64::Engine;
    use proptest::prelude::*;

    use super::*;

    /// Secrets of capitals and digits; everything around them has neither, so any capital or digit
    /// in what crosses is a piece of the secret.
    fn secret() -> impl Strategy<Value = String> {
        "[A-Z0-9]{8,40}"
    }

    fn filler() -> impl Strategy<Value = String> {
        "[a-z .:/?=&_-]{0,600}"
    }

    /// The secret as an upstream might echo it: as is, percent-encoded, in base64, JSON-escaped.
    fn spelled(secret: &str, how: u8) -> String {
        match how % 4 {
            0 => secret.to_owned(),
            1 => secret.bytes().map(|b| format!("%{b:02X}")).collect(),
            2 => base64::engine::general_purpose::STANDARD.encode(secret),
            _ => secret.chars().map(|c| format!("\\u{:04x}", c as u32)).collect(),
        }
    }

    fn leaks(text: &str) -> bool {
        text.chars().any(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    }

    proptest! {
        /// An error message cut wherever: never a piece of the secret, whichever side of the cut
        /// it stood on.
        #[test]
        fn a_bounded_message_holds_no_piece_of_a_secret(
            secret in secret(), before in filler(), after in filler(), max in 16usize..700,
        ) {
            let redactor = Redactor::new([secret.as_str()]);
            let crossing = Crossing { upstream: "up", origins: None, redactor: &redactor };
            let shown = crossing.bounded_text(&format!("{before}{secret}{after}"), max);
            prop_assert!(!leaks(&shown), "{shown}");
            prop_assert!(shown.len() <= max.max(3));
        }

        /// Progress, log data and elicitations, in any of the spellings: the secret never crosses,
        /// and a relayed elicitation always names the upstream.
        #[test]
        fn no_channel_carries_the_secret_in_any_spelling(
            secret in secret(), how in any::<u8>(), before in filler(), after in filler(),
        ) {
            let redactor = Redactor::new([secret.as_str()]);
            let crossing = Crossing { upstream: "up", origins: None, redactor: &redactor };
            let echoed = format!("{before}{}{after}", spelled(&secret, how));
            let log = crossing.value(json!({"level": "info", "data": {"nested": [echoed.clone()], echoed.clone(): true}}));
            prop_assert!(!leaks(&log.to_string()), "{log}");
            let elicitation = crossing
                .elicitation(json!({"mode": "url", "url": format!("https://x.example/?k={echoed}"), "message": echoed, "elicitationId": echoed}))
                .or_else(|_| crossing.elicitation(json!({"mode": "form", "message": echoed})));
            let elicitation = elicitation.map_err(|Refused(why)| TestCaseError::fail(why))?;
            prop_assert!(elicitation["message"].as_str().is_some_and(|m| m.starts_with("The up server asks: ")));
            for field in ["message", "url", "elicitationId"] {
                let shown = elicitation[field].as_str().unwrap_or("").replace("The up server asks: ", "");
                prop_assert!(!leaks(&shown), "{field}: {elicitation}");
            }
        }
    }
}
