//! Resources over a fixed catalogue, for any protocol era: `resources/list`,
//! `resources/templates/list`, `resources/read`, `resources/subscribe` and `resources/unsubscribe`.
//! Each function takes the request's params and what it needs, and returns the result or the
//! JSON-RPC error.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Mutex, PoisonError};

use serde_json::{Map, Value, json};

use crate::domain::SessionId;
use crate::jsonrpc::RpcError;

/// MCP's "Resource not found".
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// What reading a resource gives.
pub enum Content {
    Text(String),
    /// Base64, as `blob` carries it.
    Blob(String),
}

pub struct Resource {
    pub uri: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub mime_type: &'static str,
    pub content: Content,
}

/// A URI template of literal text and `{name}` variables, each standing for one non-empty path
/// segment (RFC 6570 level 1, without reserved characters).
pub struct Template {
    pub uri_template: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub mime_type: &'static str,
    /// The content for the variables' values, in the template's order.
    pub read: fn(&[(&str, &str)]) -> Content,
    /// Values `completion/complete` offers, by variable.
    pub suggestions: &'static [(&'static str, &'static [&'static str])],
}

pub struct Resources {
    pub resources: Vec<Resource>,
    pub templates: Vec<Template>,
}

/// A list of a fixed catalogue is one page: a cursor can only be one this server never gave out.
pub fn single_page(params: &Map<String, Value>) -> Result<(), RpcError> {
    match params.get("cursor") {
        None | Some(Value::Null) => Ok(()),
        Some(_) => Err(RpcError::invalid_params(
            "params.cursor is not a cursor this server gave out",
        )),
    }
}

fn uri_param<'p>(params: &'p Map<String, Value>, method: &str) -> Result<&'p str, RpcError> {
    params
        .get("uri")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("{method} needs params.uri (a string)")))
}

fn not_found(uri: &str) -> RpcError {
    RpcError::new(RESOURCE_NOT_FOUND, "Resource not found").with_data(json!({ "uri": uri }))
}

pub fn list(resources: &Resources, params: &Map<String, Value>) -> Result<Value, RpcError> {
    single_page(params)?;
    let listed: Vec<Value> = resources
        .resources
        .iter()
        .map(|r| json!({"uri": r.uri, "name": r.name, "description": r.description, "mimeType": r.mime_type}))
        .collect();
    Ok(json!({ "resources": listed }))
}

pub fn list_templates(resources: &Resources, params: &Map<String, Value>) -> Result<Value, RpcError> {
    single_page(params)?;
    let listed: Vec<Value> = resources
        .templates
        .iter()
        .map(|t| {
            json!({"uriTemplate": t.uri_template, "name": t.name, "description": t.description, "mimeType": t.mime_type})
        })
        .collect();
    Ok(json!({ "resourceTemplates": listed }))
}

pub fn read(resources: &Resources, params: &Map<String, Value>) -> Result<Value, RpcError> {
    let uri = uri_param(params, "resources/read")?;
    let found = match resources.resources.iter().find(|r| r.uri == uri) {
        Some(resource) => Some((resource.mime_type, contents(&resource.content))),
        None => resources.templates.iter().find_map(|template| {
            let variables = matches(template.uri_template, uri)?;
            Some((template.mime_type, contents(&(template.read)(&variables))))
        }),
    };
    let (mime_type, mut content) = found.ok_or_else(|| not_found(uri))?;
    content["uri"] = json!(uri);
    content["mimeType"] = json!(mime_type);
    Ok(json!({ "contents": [content] }))
}

fn contents(content: &Content) -> Value {
    match content {
        Content::Text(text) => json!({ "text": text }),
        Content::Blob(blob) => json!({ "blob": blob }),
    }
}

/// The variables' values when `uri` matches `template`, in the template's order.
fn matches<'t, 'u>(template: &'t str, uri: &'u str) -> Option<Vec<(&'t str, &'u str)>> {
    let mut variables = Vec::new();
    let (mut template, mut uri) = (template, uri);
    while let Some(open) = template.find('{') {
        uri = uri.strip_prefix(&template[..open])?;
        let close = open + template[open..].find('}')?;
        let end = uri.find(['/', '?', '#']).unwrap_or(uri.len());
        if end == 0 {
            return None;
        }
        variables.push((&template[open + 1..close], &uri[..end]));
        template = &template[close + 1..];
        uri = &uri[end..];
    }
    (template == uri).then_some(variables)
}

/// Sessions whose subscriptions are kept; beyond it the session that subscribed least recently
/// is forgotten.
const MAX_SUBSCRIBED_SESSIONS: usize = 1024;

/// Which listed resources each session subscribed to. Only listed URIs can be subscribed to, so a
/// session holds at most one entry per listed resource, and at most [`MAX_SUBSCRIBED_SESSIONS`]
/// sessions are held.
#[derive(Default)]
pub struct Subscriptions {
    sessions: Mutex<VecDeque<(SessionId, BTreeSet<&'static str>)>>,
}

impl Subscriptions {
    /// Moves the session's entry to the back (most recent), creating it when missing.
    fn with_session<T>(&self, session: &SessionId, change: impl FnOnce(&mut BTreeSet<&'static str>) -> T) -> T {
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = match sessions.iter().position(|(id, _)| id == session) {
            Some(index) => sessions.remove(index),
            None => None,
        };
        let (id, mut uris) = entry.unwrap_or_else(|| (session.clone(), BTreeSet::new()));
        let result = change(&mut uris);
        if !uris.is_empty() {
            if sessions.len() >= MAX_SUBSCRIBED_SESSIONS {
                sessions.pop_front();
            }
            sessions.push_back((id, uris));
        }
        result
    }

    /// The URIs `session` is subscribed to.
    #[cfg(test)]
    fn of(&self, session: &SessionId) -> Vec<&'static str> {
        let sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        sessions
            .iter()
            .find(|(id, _)| id == session)
            .map(|(_, uris)| uris.iter().copied().collect())
            .unwrap_or_default()
    }
}

fn listed<'r>(resources: &'r Resources, params: &Map<String, Value>, method: &str) -> Result<&'r Resource, RpcError> {
    let uri = uri_param(params, method)?;
    resources
        .resources
        .iter()
        .find(|r| r.uri == uri)
        .ok_or_else(|| not_found(uri))
}

pub fn subscribe(
    resources: &Resources,
    subscriptions: &Subscriptions,
    session: &SessionId,
    params: &Map<String, Value>,
) -> Result<Value, RpcError> {
    let resource = listed(resources, params, "resources/subscribe")?;
    subscriptions.with_session(session, |uris| uris.insert(resource.uri));
    Ok(json!({}))
}

pub fn unsubscribe(
    resources: &Resources,
    subscriptions: &Subscriptions,
    session: &SessionId,
    params: &Map<String, Value>,
) -> Result<Value, RpcError> {
    let resource = listed(resources, params, "resources/unsubscribe")?;
    subscriptions.with_session(session, |uris| uris.remove(resource.uri));
    Ok(json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_one_segment_per_variable() {
        assert_eq!(
            matches("test://template/{id}/data", "test://template/123/data"),
            Some(vec![("id", "123")])
        );
        assert_eq!(matches("test://template/{id}/data", "test://template//data"), None);
        assert_eq!(matches("test://template/{id}/data", "test://template/1/2/data"), None);
        assert_eq!(matches("test://template/{id}/data", "test://template/1/datum"), None);
        assert_eq!(
            matches("a/{x}-{y}", "a/1-2"),
            None,
            "a variable takes the whole segment"
        );
        assert_eq!(matches("a/{x}/{y}", "a/1/2"), Some(vec![("x", "1"), ("y", "2")]));
    }

    fn catalogue(count: usize) -> Resources {
        let uris = ["test://a", "test://b", "test://c"];
        Resources {
            resources: uris[..count]
                .iter()
                .map(|uri| Resource {
                    uri,
                    name: "r",
                    description: "r",
                    mime_type: "text/plain",
                    content: Content::Text(String::new()),
                })
                .collect(),
            templates: Vec::new(),
        }
    }

    fn uri(uri: &str) -> Map<String, Value> {
        json!({ "uri": uri }).as_object().cloned().expect("object")
    }

    #[test]
    fn subscriptions_hold_listed_uris_and_forget_the_oldest_session() {
        let resources = catalogue(2);
        let subscriptions = Subscriptions::default();
        let session = SessionId::generate();
        subscribe(&resources, &subscriptions, &session, &uri("test://a")).expect("listed");
        subscribe(&resources, &subscriptions, &session, &uri("test://a")).expect("again");
        subscribe(&resources, &subscriptions, &session, &uri("test://b")).expect("listed");
        let unknown = subscribe(&resources, &subscriptions, &session, &uri("test://nope")).unwrap_err();
        assert_eq!(unknown.code, RESOURCE_NOT_FOUND);
        assert_eq!(subscriptions.of(&session), ["test://a", "test://b"]);
        unsubscribe(&resources, &subscriptions, &session, &uri("test://a")).expect("listed");
        assert_eq!(subscriptions.of(&session), ["test://b"]);

        let others: Vec<SessionId> = (0..MAX_SUBSCRIBED_SESSIONS).map(|_| SessionId::generate()).collect();
        for other in &others {
            subscribe(&resources, &subscriptions, other, &uri("test://a")).expect("listed");
        }
        assert!(
            subscriptions.of(&session).is_empty(),
            "the least recent session was forgotten"
        );
        assert_eq!(subscriptions.of(&others[0]), ["test://a"]);
        let held = subscriptions.sessions.lock().expect("lock").len();
        assert_eq!(held, MAX_SUBSCRIBED_SESSIONS);
    }
}
