//! What a call that needs the user says about the links it sends them to, in both protocol eras:
//! the URL-mode elicitations it asks for, error -32042 whose message names each link (for clients
//! that show only the message), and for clients that cannot open URLs a tool result with the
//! links that asks the model to have the user open them and call again.

use serde_json::{Value, json};

use crate::gate::Called;
use crate::jsonrpc::{MISSING_REQUIRED_CLIENT_CAPABILITY, RpcError, URL_ELICITATION_REQUIRED};
use crate::store::ElicitationRecord;
use crate::text;
use crate::tools::ToolResult;

/// The -32042 message, at most (its `data` has every link in full).
const MAX_MESSAGE_BYTES: usize = 2048;
/// One link's explanation in that message, at most.
const MAX_STEP_MESSAGE_BYTES: usize = 256;

/// The URL-mode elicitations of a call that needs the user (gatehouse's own, or an upstream's
/// relayed), each as -32042 lists it. `None` when the call needs nothing of the kind.
pub fn of(called: &Called) -> Option<Vec<Value>> {
    match called {
        Called::Elicit(records) => Some(listed(records)),
        Called::Upstream(elicitations) => Some(elicitations.clone()),
        Called::Ran(_) | Called::Answered(_) | Called::InputRequired { .. } => None,
    }
}

/// gatehouse's own elicitations as -32042 lists them: `mode`, `elicitationId`, `url`, `message`.
pub fn listed(records: &[ElicitationRecord]) -> Vec<Value> {
    records
        .iter()
        .map(|e| json!({"mode": "url", "elicitationId": e.id.to_string(), "url": e.url, "message": e.message}))
        .collect()
}

/// Error -32042 with `elicitations` as its data, its message naming each link and what it is for
/// as far as [`MAX_MESSAGE_BYTES`] allows (the rest are counted).
pub fn required(elicitations: Vec<Value>) -> RpcError {
    let message = message(&elicitations);
    RpcError::new(URL_ELICITATION_REQUIRED, message).with_data(json!({ "elicitations": elicitations }))
}

/// For a request other than a tool call, where no result can carry the links: an error with
/// `code` whose message names each link, as -32042's does.
pub fn named_in_error(code: i64, elicitations: &[Value]) -> RpcError {
    let error = RpcError::new(code, message(elicitations));
    if code == MISSING_REQUIRED_CLIENT_CAPABILITY {
        return error.with_data(json!({"requiredCapabilities": {"elicitation": {"url": {}}}}));
    }
    error
}

/// For a client without URL mode: an error result listing every link, asking the model to have
/// the user open them and then call the tool again.
pub fn result(elicitations: &[Value]) -> ToolResult {
    let steps: Vec<String> = elicitations
        .iter()
        .map(|e| {
            let (url, message) = parts(e);
            let message = if message.is_empty() {
                "A step in the browser is needed."
            } else {
                message
            };
            format!("- {message} Open: {url}")
        })
        .collect();
    ToolResult::error(format!(
        "The user must first complete a step in their browser:\n{}\nShow the link to the user, ask them to open it and \
         finish there, then call this tool again with the same arguments.",
        steps.join("\n")
    ))
}

/// An elicitation's link and its message (empty when missing).
fn parts(elicitation: &Value) -> (&str, &str) {
    let field = |name: &str| elicitation.get(name).and_then(Value::as_str).unwrap_or("");
    (field("url"), field("message"))
}

/// "Open URL in your browser, then retry: MESSAGE" for one link; for several, each link with its
/// message in parentheses. A link is never cut: one that does not fit is counted instead.
fn message(elicitations: &[Value]) -> String {
    let steps: Vec<String> = elicitations
        .iter()
        .map(|e| {
            let (url, message) = parts(e);
            let message = text::bounded(message, MAX_STEP_MESSAGE_BYTES);
            match (elicitations.len(), message.is_empty()) {
                (1, true) => format!("Open {url} in your browser, then retry."),
                (1, false) => format!("Open {url} in your browser, then retry: {message}"),
                (_, true) => url.to_owned(),
                (_, false) => format!("{url} ({message})"),
            }
        })
        .collect();
    let mut said = if steps.len() == 1 {
        String::new()
    } else {
        "Open these links in your browser, then retry:".to_owned()
    };
    let mut left = steps.len();
    for step in &steps {
        // Room kept for the count of those left out.
        if said.len() + 1 + step.len() + 48 > MAX_MESSAGE_BYTES {
            break;
        }
        if !said.is_empty() {
            said.push(' ');
        }
        said.push_str(step);
        left -= 1;
    }
    match (left, said.is_empty()) {
        (0, _) => said,
        (_, true) => "Open the links in this error's data in your browser, then retry.".to_owned(),
        (_, false) => format!("{said} (and {left} more in this error's data)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(url: &str, message: &str) -> Value {
        json!({"mode": "url", "url": url, "message": message})
    }

    #[test]
    fn the_message_names_each_link_and_what_it_is_for() {
        let one = required(vec![link(
            "https://gw.example/connect/1",
            "Authorization is required to access your GitHub account.",
        )]);
        assert_eq!(
            one.message,
            "Open https://gw.example/connect/1 in your browser, then retry: Authorization is required to access your \
             GitHub account."
        );
        assert_eq!(one.code, URL_ELICITATION_REQUIRED);
        let two = message(&[
            link("https://gw.example/connect/1", "Sign in."),
            link("https://gw.example/forms/2", ""),
        ]);
        assert_eq!(
            two,
            "Open these links in your browser, then retry: https://gw.example/connect/1 (Sign in.) \
             https://gw.example/forms/2"
        );
    }

    #[test]
    fn the_message_is_bounded_and_never_cuts_a_link() {
        let many: Vec<Value> = (0..100)
            .map(|i| link(&format!("https://gw.example/connect/{i}"), &"x".repeat(1000)))
            .collect();
        let said = message(&many);
        assert!(said.len() <= MAX_MESSAGE_BYTES, "{}", said.len());
        assert!(said.contains("https://gw.example/connect/0 ("), "{said}");
        assert!(said.ends_with("more in this error's data)"), "{said}");
        let huge = link(&format!("https://gw.example/{}", "a".repeat(5000)), "Sign in.");
        assert_eq!(
            message(&[huge]),
            "Open the links in this error's data in your browser, then retry."
        );
    }
}
