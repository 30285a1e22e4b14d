//! The repository's deploy/ files as the tests run them: read from the checkout, adapted to this
//! machine by textual substitutions that must each match exactly once (so a change to a file fails
//! the tests loudly instead of leaving them to test something else), and the wait for the proxy
//! running one to answer.

use std::path::Path;
use std::process::ExitStatus;

use super::{STARTUP, eventually_within, repo};

/// `deploy/{path}`, as an operator copies it.
pub fn deploy_file(path: &str) -> String {
    let path = repo().join("deploy").join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// `text` (the file `what`) with each `(from, to)` applied in turn; panics, naming `adapter` (the
/// helper to update), when a `from` does not occur exactly once in the text as it is by then.
pub fn substitute(what: &str, adapter: &str, text: &str, substitutions: &[(&str, String)]) -> String {
    substitutions.iter().fold(text.to_owned(), |text, (from, to)| {
        let found = text.matches(from).count();
        assert_eq!(
            found, 1,
            "the {what} changed: {from:?} must occur exactly once for {adapter} to adapt it \
             (found {found} times); update its substitutions"
        );
        text.replacen(from, to, 1)
    })
}

/// Waits until the proxy `what` answers any HTTP request at `base`; panics with its log (the file
/// `log`) when `exited` finds its process gone first.
pub async fn until_answering(what: &str, base: &str, log: &Path, mut exited: impl FnMut() -> Option<ExitStatus>) {
    let http = reqwest::Client::new();
    eventually_within(STARTUP, &format!("{what} answers at {base}"), async || {
        if let Some(status) = exited() {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            panic!("{what} exited ({status}) before answering:\n{log}");
        }
        http.get(base).send().await.ok().map(drop)
    })
    .await;
}
