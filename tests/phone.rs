//! The pages on a phone, and first the check they must pass (walk.mjs's `expect_fits_viewport`),
//! checked itself in headless Chromium at 390 x 844 (a current phone's screen in CSS pixels) on
//! small pages that break each of its rules, and one that keeps them all.

mod common;

use common::browser::{artifact_dir, browser_available, walk};
use serde_json::{Value, json};

/// The screen: an iPhone 14's, in CSS pixels.
const VIEWPORT: (u32, u32) = (390, 844);

/// The check itself, on pages made to break each of its rules (and one that keeps them all): it
/// fails each broken one for its reason, and passes the page that fits.
#[tokio::test]
async fn the_fit_check_fails_each_way_a_page_can_not_fit() {
    if !browser_available() {
        return;
    }
    let wide = "x".repeat(120);
    let fits = format!(
        "<div style=\"overflow-x: auto\"><table><tr><td style=\"white-space: nowrap\">{wide} FAR</td></tr></table></div>\
         <p style=\"overflow-wrap: anywhere\">{wide}</p>"
    );
    let cases = [
        (fits, "FAR", None),
        (
            format!("<table><tr><td>{wide}</td></tr></table>"),
            "",
            Some("the document is"),
        ),
        (
            format!("<div style=\"overflow-x: hidden\"><p style=\"width: 600px\">{wide}</p></div>"),
            "",
            Some("hides what overflows it (overflow-x: hidden)"),
        ),
        (
            format!("<p style=\"white-space: nowrap; overflow: auto; text-overflow: ellipsis\">{wide}</p>"),
            "",
            Some("cuts its text with an ellipsis"),
        ),
        (
            "<div style=\"overflow-x: auto\"><p style=\"margin-left: -500px\">OUT OF REACH</p></div>".to_owned(),
            "OUT OF REACH",
            Some("\"OUT OF REACH\" in <p> \"OUT OF REACH\" is cut off by <div>"),
        ),
        (
            "<p style=\"margin-left: -200px\">OFF TO THE LEFT</p>".to_owned(),
            "",
            Some("<p> \"OFF TO THE LEFT\" spans -"),
        ),
        (
            "<p style=\"visibility: hidden\">INVISIBLE</p>".to_owned(),
            "INVISIBLE",
            Some("\"INVISIBLE\" in <p> \"INVISIBLE\" is not rendered"),
        ),
        (String::new(), "ABSENT", Some("\"ABSENT\" is not on the page")),
    ];
    let outcomes = tokio::task::spawn_blocking(move || {
        cases
            .into_iter()
            .map(|(body, visible, failure)| (walk(&fit_check(&body, visible)), failure))
            .collect::<Vec<_>>()
    })
    .await
    .expect("walk");
    for (outcome, failure) in outcomes {
        match (outcome, failure) {
            (Ok(_), None) => {}
            (Err(error), Some(reason)) => assert!(error.contains(reason), "expected {reason:?}: {error}"),
            (outcome, failure) => panic!("expected {failure:?}, got {outcome:?}"),
        }
    }
}

/// A walk of a page with `body` (as a data: URL) at the phone's width, expecting it to fit and
/// show `visible` (if not empty).
fn fit_check(body: &str, visible: &str) -> Value {
    use base64::Engine;
    let html = format!("<!doctype html><meta name=\"viewport\" content=\"width=device-width\"><h1>Case</h1>{body}");
    let visible: Vec<&str> = [visible].into_iter().filter(|v| !v.is_empty()).collect();
    json!({
        "screenshots": artifact_dir("phone-fit-check"),
        "viewport": {"width": VIEWPORT.0, "height": VIEWPORT.1},
        "steps": [{
            "goto": format!("data:text/html;base64,{}", base64::engine::general_purpose::STANDARD.encode(html)),
            "expect_fits_viewport": {"visible": visible},
        }],
    })
}
