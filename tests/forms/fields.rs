//! Every field type and rule, checked through real posts: what a refused answer shows again and
//! what it does not.

use super::*;

const PROFILE_FIELDS: &[&str] = &[
    "name", "bio", "email", "site", "ratio", "count", "agree", "news", "plan", "start", "api_key",
];

/// What the re-rendered page must show for a posted value: boxes show ticked or not, a select
/// shows only a value among its options, and a secret is never shown.
fn redisplayed(field: &str, posted: Option<&str>) -> String {
    let posted = posted.unwrap_or("");
    match field {
        "agree" | "news" => if matches!(posted, "true" | "on") { "true" } else { "" }.to_owned(),
        "plan" if !matches!(posted, "free" | "pro") => String::new(),
        "api_key" => String::new(),
        _ => posted.to_owned(),
    }
}

/// (field, posted value or None for not posted, expected message fragment), one case a line.
#[rustfmt::skip]
fn invalid_profile_answers() -> Vec<(&'static str, Option<String>, &'static str)> {
    let some = |s: &str| Some(s.to_owned());
    vec![
        ("name", some(""), "This field is required."),
        ("name", some("   "), "This field is required."),
        ("name", some("A"), "Enter at least 2 characters."),
        ("name", Some("A".repeat(21)), "Enter at most 20 characters."),
        ("name", some("Ada 1"), "Enter a value in the expected format."),
        ("name", some("Ada\nL"), "Enter this on one line, without line breaks."),
        ("name", some("Ada\u{7}"), "Remove the invisible control characters"),
        ("name", some("Ada\0"), "Remove the NUL character"),
        ("bio", Some("b".repeat(51)), "Enter at most 50 characters."),
        ("bio", some("tabs\tand\nbreaks\0"), "Remove the NUL character"),
        ("email", None, "This field is required."),
        ("email", some("ada.example.com"), "Enter an email address like name@example.com."),
        ("email", some("ada@example"), "Enter an email address like name@example.com."),
        ("email", some("ada lovelace@example.com"), "Enter an email address like"),
        ("site", some("ftp://example.com"), "Enter a web address starting with https:// or http://."),
        ("site", some("example.com"), "Enter a web address starting with https://"),
        ("ratio", some("lots"), "Enter a number."),
        ("ratio", some("inf"), "Enter a number."),
        ("ratio", some("0.4"), "Enter a number from 0.5 to 10."),
        ("ratio", some("10.01"), "Enter a number from 0.5 to 10."),
        ("count", some("7.5"), "Enter a whole number."),
        ("count", some("0"), "Enter a whole number from 1 to 100."),
        ("count", some("101"), "Enter a whole number from 1 to 100."),
        ("agree", None, "Tick this box to continue."),
        ("agree", some("yes"), "This box can only be ticked or left empty."),
        ("news", some("1"), "This box can only be ticked or left empty."),
        ("plan", some(""), "This field is required."),
        ("plan", some("enterprise"), "Choose one of the options."),
        ("start", some("14/03/2026"), "Enter a date like 2026-01-31."),
        ("start", some("2026-3-14"), "Enter a date like 2026-01-31."),
        ("start", some("2026-02-30"), "Enter a date like 2026-01-31."),
        ("start", some("2025-12-31"), "Enter a date from 2026-01-01 to 2026-12-31."),
        ("start", some("2027-01-01"), "Enter a date from 2026-01-01 to 2026-12-31."),
        ("api_key", some(""), "This field is required."),
        ("api_key", some("sk-abc"), "Enter at least 10 characters."),
        ("api_key", some("pk-abcdefghij"), "Enter a value in the expected format."),
    ]
}

backend_test!(
    /// Each rule refuses its bad value on the server with its own message next to its own field
    /// (and only there), keeps everything typed but the secret, and stores nothing; a valid post
    /// completes the elicitation, and the retried call sends typed values upstream.
    async fn every_field_type_and_rule_is_checked_over_http(backend: Backend) {
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let reply = s.call("profile", json!({})).await;
        let elicitation = elicitation_of(&reply);
        let id = elicitation["elicitationId"].as_str().expect("id").to_owned();
        let url = url_of(&elicitation);
        assert_eq!(url, s.url(&format!("/forms/{id}")));
        assert_eq!(
            elicitation["message"],
            "Please fill in \"Your profile\" in your browser."
        );
        assert_eq!(s.requests(), 0, "nothing runs without the values");

        let browser = Browser::new();
        let page = browser.get(&url).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.body.contains("novalidate"), "the server alone validates");
        assert_eq!(shown_value(&page.body, "count"), "5", "the configured default");
        assert_eq!(shown_value(&page.body, "plan"), "", "no default: nothing chosen");
        assert_eq!(shown_value(&page.body, "news"), "", "unticked");
        for field in PROFILE_FIELDS {
            assert!(field_error(&page.body, field).is_none(), "no message before a post");
        }
        let csrf = page.csrf();
        let secret = format!("sk-{}", uuid::Uuid::now_v7().simple());
        let valid = valid_profile(&secret);

        for (field, value, message) in invalid_profile_answers() {
            let posted = with_field(&valid, field, value.as_deref());
            let page = press(&browser, &url, &s.base(), &csrf, "submit", &posted).await;
            let case = format!("{field} = {value:?}");
            assert_eq!(page.status, StatusCode::UNPROCESSABLE_ENTITY, "{case}: {}", page.body);
            let shown = field_error(&page.body, field).unwrap_or_else(|| panic!("{case}: no message for {field}"));
            assert!(shown.contains(message), "{case}: {shown:?} should say {message:?}");
            assert_eq!(page.body.matches("class=\"error\">").count(), 1, "{case}: one message");
            assert!(page.body.contains("Please correct 1 answer"), "{case}: summary");
            assert!(
                control_tag(&page.body, field).0.contains("aria-invalid=\"true\""),
                "{case}: the field is marked invalid"
            );
            assert_eq!(
                page.body.matches("aria-invalid=\"true\"").count(),
                1,
                "{case}: only that field"
            );
            for other in PROFILE_FIELDS {
                let typed = posted.iter().find(|(k, _)| k == other).map(|(_, v)| v.as_str());
                assert_eq!(
                    shown_value(&page.body, other),
                    redisplayed(other, typed),
                    "{case}: what was typed in {other} is shown again"
                );
            }
            assert!(!page.body.contains(&secret), "{case}: the typed secret is not echoed");
        }
        assert_eq!(
            s.count("SELECT COUNT(*) FROM form_values").await,
            0,
            "refused posts store nothing"
        );
        assert_eq!(
            s.count("SELECT COUNT(*) FROM elicitations WHERE status = 'pending'")
                .await,
            1
        );

        let saved = press(&browser, &url, &s.base(), &csrf, "submit", &valid).await;
        assert_saved(&saved);
        assert_eq!(stream.next_completion().await, id);
        assert_eq!(
            s.count("SELECT COUNT(*) FROM elicitations WHERE status = 'completed'")
                .await,
            1
        );

        s.run("profile", json!({})).await;
        let seen = s.last_request();
        assert_eq!(seen.path, "/profile");
        assert_eq!(
            seen.json(),
            json!({
                "name": "Ada Lovelace",
                "bio": "Line one\nLine two",
                "email": "ada@example.com",
                "site": "https://example.com/ada",
                "ratio": 2.5,
                "count": 7,
                "agree": true,
                "news": false,
                "plan": "pro",
                "start": "2026-03-14",
            }),
            "typed values, trimmed where the field trims"
        );
        assert_eq!(seen.header("authorization"), Some(format!("Bearer {secret}").as_str()));
        s.server.stop().await;
    }
);
