//! The JSON-RPC parser: any bytes a POST body could hold, any JSON value and anything shaped like a
//! message are classified without panic, consistently with what they hold, and every message
//! gatehouse or a client builds reads back as itself.

use gatehouse::jsonrpc::{self, INVALID_REQUEST, Message, RequestId, RpcError};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::{Map, Value, json};

use crate::strategies::{hostile_text, json_value};

/// An error answer is the refused message's id plus this much at most.
const ERROR_ANSWER_OVERHEAD: usize = 256;

fn request_id() -> impl Strategy<Value = RequestId> {
    prop_oneof![
        any::<i64>().prop_map(RequestId::Number),
        hostile_text().prop_map(RequestId::String),
    ]
}

fn params() -> impl Strategy<Value = Map<String, Value>> {
    btree_map("[a-z_]{0,6}", json_value(), 0..4).prop_map(|map| map.into_iter().collect())
}

/// An object shaped like a message: each member absent, of the right type, or anything.
fn message_like() -> impl Strategy<Value = Value> {
    fn member(good: BoxedStrategy<Value>) -> impl Strategy<Value = Option<Value>> {
        option::of(prop_oneof![2 => good, 1 => json_value()])
    }
    (
        member(Just(json!("2.0")).boxed()),
        member(request_id().prop_map(|id| json!(id)).boxed()),
        member(hostile_text().prop_map(Value::String).boxed()),
        member(params().prop_map(Value::Object).boxed()),
        member(json_value().boxed()),
        member(Just(json!({"code": -32000, "message": "failed"})).boxed()),
    )
        .prop_map(|(version, id, method, params, result, error)| {
            let members = [
                ("jsonrpc", version),
                ("id", id),
                ("method", method),
                ("params", params),
                ("result", result),
                ("error", error),
            ];
            Value::Object(
                members
                    .into_iter()
                    .filter_map(|(name, value)| Some((name.to_owned(), value?)))
                    .collect(),
            )
        })
}

/// What a POST body may hold: random bytes, a message with a few bytes changed or cut, or deep
/// nesting.
fn body_bytes() -> impl Strategy<Value = Vec<u8>> {
    let mutated = (
        message_like(),
        vec((any::<Index>(), any::<u8>()), 0..4),
        option::of(any::<Index>()),
    )
        .prop_map(|(message, changes, cut)| {
            let mut bytes = serde_json::to_vec(&message).expect("a JSON value serializes");
            for (at, byte) in changes {
                let at = at.index(bytes.len());
                bytes[at] = byte;
            }
            if let Some(cut) = cut {
                bytes.truncate(cut.index(bytes.len()));
            }
            bytes
        });
    let nested = (select(&["[", "{\"params\":", "[{\"a\":"][..]), 1usize..4000)
        .prop_map(|(opening, depth)| opening.repeat(depth).into_bytes());
    prop_oneof![vec(any::<u8>(), 0..256), mutated, nested]
}

/// Whether `value` is a request or notification JSON-RPC 2.0 allows (as MCP restricts it:
/// object params, string or integer id).
fn is_valid_request(value: &Value) -> bool {
    value["jsonrpc"] == "2.0"
        && value["method"].is_string()
        && (value.get("params").is_none_or(Value::is_object))
        && value.get("id").is_none_or(|id| id.is_string() || id.is_i64())
}

/// Whether `value` is a valid answer to a request of ours.
fn is_valid_response(value: &Value) -> bool {
    value["jsonrpc"] == "2.0"
        && value.get("method").is_none()
        && (value.get("result").is_some() || value.get("error").is_some())
        && value.get("id").is_some_and(|id| id.is_string() || id.is_i64())
}

/// The outcome says what `value` holds: a message read from it carries its members unchanged, and
/// a refusal keeps the id only when it was readable and refuses only what is invalid.
fn check_classified(
    value: &Value,
    outcome: Result<Message, (Option<RequestId>, RpcError)>,
) -> Result<(), TestCaseError> {
    let member = |name: &str| value.get(name);
    match outcome {
        Ok(message) => {
            prop_assert_eq!(member("jsonrpc"), Some(&json!("2.0")));
            match message {
                Message::Request { id, method, params } => {
                    prop_assert_eq!(member("id"), Some(&json!(id)));
                    prop_assert_eq!(member("method"), Some(&json!(method)));
                    prop_assert_eq!(member("params"), params.as_ref());
                    prop_assert!(is_valid_request(value));
                }
                Message::Notification { method, params } => {
                    prop_assert_eq!(member("id"), None);
                    prop_assert_eq!(member("method"), Some(&json!(method)));
                    prop_assert_eq!(member("params"), params.as_ref());
                    prop_assert!(is_valid_request(value));
                }
                Message::Response { id, answer } => {
                    prop_assert_eq!(member("id"), Some(&json!(id)));
                    match &answer {
                        Ok(result) => prop_assert_eq!(member("result"), Some(result)),
                        Err(error) => prop_assert_eq!(member("error").unwrap_or(&Value::Null), error),
                    }
                    prop_assert!(is_valid_response(value));
                }
            }
        }
        Err((id, error)) => {
            prop_assert_eq!(error.code, INVALID_REQUEST);
            if let Some(id) = &id {
                prop_assert_eq!(member("id"), Some(&json!(id)));
            }
            prop_assert!(
                !is_valid_request(value) && !is_valid_response(value),
                "a valid message was refused: {}",
                error.message
            );
            let answer = serde_json::to_vec(&jsonrpc::error_response(id.as_ref(), &error))?;
            let id_bytes = serde_json::to_vec(&id)?.len();
            prop_assert!(
                answer.len() <= id_bytes + ERROR_ANSWER_OVERHEAD,
                "{} bytes",
                answer.len()
            );
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn any_json_value_is_classified_by_what_it_holds(value in prop_oneof![message_like(), json_value()]) {
        check_classified(&value, jsonrpc::classify(value.clone()))?;
    }

    #[test]
    fn any_body_is_parsed_without_panic(bytes in body_bytes()) {
        // What the transport does with a POST body.
        if let Ok(value) = serde_json::from_slice::<Value>(&bytes) {
            check_classified(&value, jsonrpc::classify(value.clone()))?;
        }
    }

    #[test]
    fn built_messages_read_back_as_themselves(
        id in request_id(),
        method in hostile_text(),
        params in params(),
        result in json_value(),
    ) {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        // Through bytes, as a client's request arrives.
        let request = serde_json::from_slice(&serde_json::to_vec(&request)?)?;
        match jsonrpc::classify(request) {
            Ok(Message::Request { id: read_id, method: read_method, params: read_params }) => {
                prop_assert_eq!(read_id, id.clone());
                prop_assert_eq!(read_method, method.clone());
                // As sent through text (which may round a float's last digit).
                let sent: Value = serde_json::from_slice(&serde_json::to_vec(&params)?)?;
                prop_assert_eq!(read_params, Some(sent));
            }
            other => prop_assert!(false, "a request read as {other:?}"),
        }
        match jsonrpc::classify(jsonrpc::notification(&method, Value::Object(params))) {
            Ok(Message::Notification { method: read, .. }) => prop_assert_eq!(&read, &method),
            other => prop_assert!(false, "a notification read as {other:?}"),
        }
        match jsonrpc::classify(jsonrpc::result_response(&id, result.clone())) {
            Ok(Message::Response { id: read_id, answer: read }) => {
                prop_assert_eq!(read_id, id.clone());
                prop_assert_eq!(read, Ok(result));
            }
            other => prop_assert!(false, "a result read as {other:?}"),
        }
        let error = RpcError::new(-32000, "failed").with_data(json!({"why": method}));
        match jsonrpc::classify(jsonrpc::error_response(Some(&id), &error)) {
            Ok(Message::Response { id: read_id, answer: Err(read) }) => {
                prop_assert_eq!(read_id, id);
                prop_assert_eq!(read["code"].clone(), json!(-32000));
            }
            other => prop_assert!(false, "an error read as {other:?}"),
        }
    }
}
