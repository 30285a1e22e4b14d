//! What an upstream offers beside tools: its resources, resource templates and prompts, listed
//! with its tools and offered beside gatehouse's own under names and URIs of gatehouse's, and how
//! those map back to the upstream's.
//!
//! A prompt's name gets the upstream's tool prefix, as its tools do. A resource URI (or URI
//! template) gets the upstream's *tag* and a `+` in front: `everything+demo://resource/1` is the
//! `everything` upstream's `demo://resource/1`. The result is a URI whose scheme is
//! `<tag>+<scheme>` (a scheme may hold `+`), for any scheme the upstream uses; the tag holds no
//! `+`, so the first one splits it, and a template stays a template (its variables are untouched).
//! The tag is the upstream's id in lower case with `_` as `.` (a scheme may not hold `_`), and
//! `u` in front when the id does not start with a letter (a scheme must); two upstreams may not
//! share one (checked when the configuration is read). Parsers lower-case schemes, so the tag is matched ignoring case.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use rmcp::model::PaginatedRequestParams;
use serde_json::{Map, Value, json};

use super::pool::Session;
use super::upstream::Upstream;
use crate::text;

/// Entries taken from one of an upstream's lists, at most.
pub const MAX_ENTRIES: usize = 1000;
/// One entry as listed, serialized, at most; a larger one is left out.
const MAX_ENTRY_BYTES: usize = 64 * 1024;
/// Pages read from one of an upstream's lists, at most.
const MAX_PAGES: usize = 100;
/// A description is cut (visibly) beyond this.
const MAX_DESCRIPTION_BYTES: usize = 16 * 1024;

/// The upstream's tag in the URIs gatehouse gives its resources.
pub fn uri_tag(id: &str) -> String {
    let tag: String = id
        .chars()
        .map(|c| if c == '_' { '.' } else { c.to_ascii_lowercase() })
        .collect();
    if !tag.starts_with(|c: char| c.is_ascii_lowercase()) {
        format!("u{tag}")
    } else {
        tag
    }
}

/// gatehouse's URI for the upstream's `uri` (or URI template).
pub fn exposed_uri(tag: &str, uri: &str) -> String {
    format!("{tag}+{uri}")
}

/// The upstream's URI for gatehouse's `uri`, when `uri` is one of this tag's.
pub fn original_uri<'u>(tag: &str, uri: &'u str) -> Option<&'u str> {
    let (head, rest) = uri.split_once('+')?;
    head.eq_ignore_ascii_case(tag).then_some(rest)
}

/// Which of the upstream's offers gatehouse relays, from the capabilities it declared.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Declared {
    pub resources: bool,
    pub subscribe: bool,
    pub prompts: bool,
    pub completions: bool,
}

impl Declared {
    pub fn of(capabilities: &Value) -> Self {
        Self {
            resources: capabilities.get("resources").is_some_and(Value::is_object),
            subscribe: capabilities
                .pointer("/resources/subscribe")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            prompts: capabilities.get("prompts").is_some_and(Value::is_object),
            completions: capabilities.get("completions").is_some_and(Value::is_object),
        }
    }
}

/// One upstream's resources, templates and prompts as gatehouse offers them.
#[derive(Default)]
pub struct Offers {
    pub declared: Declared,
    pub resources: Vec<Value>,
    pub templates: Vec<Value>,
    pub prompts: Vec<Value>,
    /// The upstream's name of each prompt, by gatehouse's.
    prompt_names: HashMap<String, String>,
}

impl Offers {
    /// The offers of a stored listing (`{}` when there is none). `taken` holds the prompt names
    /// earlier upstreams have; this one's are added.
    pub fn from_listing(upstream: &Upstream, listing: &Value, taken: &mut HashSet<String>) -> Self {
        let declared = Declared::of(listing.get("capabilities").unwrap_or(&Value::Null));
        let tag = uri_tag(&upstream.id);
        let entries = |key: &'static str| {
            listing
                .get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(move |entry| fits(upstream, key, entry))
                .take(MAX_ENTRIES)
        };
        let resources = entries("resources")
            .filter_map(|r| renamed(r, "uri", |uri| Some(exposed_uri(&tag, uri))))
            .collect();
        let templates = entries("resourceTemplates")
            .filter_map(|t| renamed(t, "uriTemplate", |uri| Some(exposed_uri(&tag, uri))))
            .collect();
        let mut prompt_names = HashMap::new();
        let prompts = entries("prompts")
            .filter_map(|prompt| {
                let name = prompt.get("name").and_then(Value::as_str)?;
                let exposed = upstream.exposed_name(name);
                if !taken.insert(exposed.clone()) {
                    tracing::warn!(upstream = %upstream.id, prompt = %exposed, "left out a prompt whose name another prompt has already; set `prefix`");
                    return None;
                }
                prompt_names.insert(exposed.clone(), name.to_owned());
                renamed(prompt, "name", |_| Some(exposed.clone()))
            })
            .collect();
        Self {
            declared,
            resources,
            templates,
            prompts,
            prompt_names,
        }
    }

    /// The upstream's name of gatehouse's prompt `name`.
    pub fn prompt(&self, name: &str) -> Option<&str> {
        self.prompt_names.get(name).map(String::as_str)
    }
}

fn fits(upstream: &Upstream, list: &str, entry: &Value) -> bool {
    let fits = entry.is_object() && serde_json::to_vec(entry).is_ok_and(|bytes| bytes.len() <= MAX_ENTRY_BYTES);
    if !fits {
        tracing::warn!(upstream = %upstream.id, list, "left out an entry that is not an object or is larger than {MAX_ENTRY_BYTES} bytes");
    }
    fits
}

/// `entry` with `field` (a string) replaced by `rename`'s value and its description bounded;
/// `None` when it lacks the field.
fn renamed(entry: &Value, field: &str, rename: impl FnOnce(&str) -> Option<String>) -> Option<Value> {
    let new = rename(entry.get(field).and_then(Value::as_str)?)?;
    let mut shown = entry.clone();
    shown[field] = json!(new);
    if let Some(description) = entry.get("description").and_then(Value::as_str) {
        shown["description"] = json!(text::bounded(description, MAX_DESCRIPTION_BYTES));
    }
    Some(shown)
}

/// Replaces every resource URI the upstream's answer names (`contents[].uri` of a read, a
/// `resource_link`'s `uri`, an embedded `resource`'s `uri`) with gatehouse's, so the client can
/// read them through gatehouse.
pub fn relink(value: &mut Value, tag: &str) {
    match value {
        Value::Object(object) => {
            let links_uri = matches!(object.get("type").and_then(Value::as_str), Some("resource_link"))
                || object.contains_key("text") && object.contains_key("uri")
                || object.contains_key("blob") && object.contains_key("uri");
            if links_uri {
                rename_uri(object, tag);
            }
            for (_, inner) in object.iter_mut() {
                relink(inner, tag);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| relink(item, tag)),
        _ => {}
    }
}

fn rename_uri(object: &mut Map<String, Value>, tag: &str) {
    if let Some(Value::String(uri)) = object.get_mut("uri") {
        *uri = exposed_uri(tag, uri);
    }
}

/// What the upstream offers beside tools, as stored with its tools: the lists its capabilities
/// declare (all pages, bounded), within `timeout`. A list it declares but fails to give is
/// logged and left empty; the listing goes on.
pub async fn list(session: &Session, timeout: Duration) -> Result<Value, String> {
    let peer = session.service.peer();
    let capabilities = peer
        .peer_info()
        .and_then(|info| serde_json::to_value(&info.capabilities).ok())
        .unwrap_or_else(|| json!({}));
    let declared = Declared::of(&capabilities);
    if !declared.resources && !declared.prompts {
        return Ok(json!({}));
    }
    let listing = async {
        let mut offers = Map::new();
        offers.insert("capabilities".into(), kept_capabilities(&capabilities));
        if declared.resources {
            let resources = pages(session, "resources", |cursor| async move {
                let page = peer.list_resources(Some(cursor)).await?;
                Ok((serde_json::to_value(&page.resources), page.next_cursor))
            })
            .await;
            offers.insert("resources".into(), resources);
            let templates = pages(session, "resource templates", |cursor| async move {
                let page = peer.list_resource_templates(Some(cursor)).await?;
                Ok((serde_json::to_value(&page.resource_templates), page.next_cursor))
            })
            .await;
            offers.insert("resourceTemplates".into(), templates);
        }
        if declared.prompts {
            let prompts = pages(session, "prompts", |cursor| async move {
                let page = peer.list_prompts(Some(cursor)).await?;
                Ok((serde_json::to_value(&page.prompts), page.next_cursor))
            })
            .await;
            offers.insert("prompts".into(), prompts);
        }
        Value::Object(offers)
    };
    tokio::time::timeout(timeout, listing)
        .await
        .map_err(|_| format!("no answer within {}", humantime::format_duration(timeout)))
}

/// The part of the upstream's capabilities gatehouse relays on.
fn kept_capabilities(capabilities: &Value) -> Value {
    let mut kept = Map::new();
    for key in ["resources", "prompts", "completions"] {
        if let Some(value) = capabilities.get(key).filter(|v| v.is_object()) {
            kept.insert(key.to_owned(), value.clone());
        }
    }
    Value::Object(kept)
}

type Page = (Result<Value, serde_json::Error>, Option<String>);

/// Every page of one list, up to [`MAX_ENTRIES`] entries and [`MAX_PAGES`] pages; what was read
/// before a failure.
async fn pages<F, Fut>(session: &Session, what: &str, mut page: F) -> Value
where
    F: FnMut(PaginatedRequestParams) -> Fut,
    Fut: Future<Output = Result<Page, rmcp::service::ServiceError>>,
{
    let mut entries = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        match page(PaginatedRequestParams::default().with_cursor(cursor)).await {
            Ok((Ok(Value::Array(listed)), next)) => {
                entries.extend(listed);
                cursor = next;
            }
            Ok((_, _)) => {
                tracing::warn!(upstream = %session.upstream, what, "could not read the upstream's list");
                break;
            }
            Err(error) => {
                tracing::warn!(upstream = %session.upstream, what, %error, "could not list the upstream's offers");
                break;
            }
        }
        if entries.len() >= MAX_ENTRIES || cursor.is_none() {
            break;
        }
    }
    entries.truncate(MAX_ENTRIES);
    Value::Array(entries)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn tags_are_schemes_and_ids_map_to_distinct_tags() {
        assert_eq!(uri_tag("everything"), "everything");
        assert_eq!(uri_tag("My_Server-2"), "my.server-2");
        assert_eq!(uri_tag("9lives"), "u9lives");
        assert_eq!(uri_tag("_x"), "u.x");
        assert_eq!(exposed_uri("gh", "repo://a/{path}"), "gh+repo://a/{path}");
    }

    #[test]
    fn uris_of_other_upstreams_or_none_are_not_mapped() {
        assert_eq!(original_uri("gh", "gh+file:///etc/hosts"), Some("file:///etc/hosts"));
        assert_eq!(
            original_uri("gh", "GH+test://x"),
            Some("test://x"),
            "parsers lower-case schemes"
        );
        assert_eq!(original_uri("gh", "ghx+test://x"), None);
        assert_eq!(original_uri("gh", "test://x"), None);
        assert_eq!(original_uri("gh", "gh"), None);
    }

    #[test]
    fn links_in_answers_are_renamed_and_other_uris_left_alone() {
        let mut answer = json!({
            "contents": [{"uri": "a://1", "text": "x"}, {"uri": "a://2", "blob": "eA=="}],
            "messages": [{"role": "user", "content": {"type": "resource", "resource": {"uri": "a://3", "text": "y"}}}],
            "content": [{"type": "resource_link", "uri": "a://4", "name": "four"}, {"type": "text", "text": "a://5"}],
            "other": {"uri": "https://example.com"},
        });
        relink(&mut answer, "up");
        assert_eq!(answer["contents"][0]["uri"], "up+a://1");
        assert_eq!(answer["contents"][1]["uri"], "up+a://2");
        assert_eq!(answer["messages"][0]["content"]["resource"]["uri"], "up+a://3");
        assert_eq!(answer["content"][0]["uri"], "up+a://4");
        assert_eq!(answer["content"][1]["text"], "a://5");
        assert_eq!(answer["other"]["uri"], "https://example.com");
    }

    proptest! {
        /// Any id and any URI: the mapping is undone exactly, and no other id's tag claims it.
        #[test]
        fn the_uri_mapping_is_reversible_and_unambiguous(
            id in "[A-Za-z0-9_-]{1,20}",
            other in "[A-Za-z0-9_-]{1,20}",
            uri in "\\PC{0,80}",
        ) {
            let tag = uri_tag(&id);
            prop_assert!(tag.starts_with(|c: char| c.is_ascii_lowercase()));
            prop_assert!(tag.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'));
            let exposed = exposed_uri(&tag, &uri);
            prop_assert_eq!(original_uri(&tag, &exposed), Some(uri.as_str()));
            let other_tag = uri_tag(&other);
            if other_tag != tag {
                prop_assert_eq!(original_uri(&other_tag, &exposed), None);
            }
        }
    }
}
