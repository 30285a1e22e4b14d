//! An upstream's tools as gatehouse offers them: built from the catalogue the upstream listed (or,
//! before any listing succeeded, from the allow-list's names), prefixed, filtered by the
//! allow-list, bounded, and named uniquely across gatehouse and every upstream ([`assign`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use serde_json::{Value, json};

use super::Core;
use super::offers::Offers;
use super::tool::UpstreamTool;
use super::upstream::Upstream;
use crate::config::ElicitMode;
use crate::forms::{Form, FormScope, Forms};
use crate::gate::Requirement;
use crate::store::CatalogueRecord;
use crate::text;
use crate::tools::{InputSchema, Tool, ToolDefinition, form_details, valid_tool_name};

/// Tools taken from one upstream's listing, at most.
pub const MAX_TOOLS: usize = 1000;
/// One tool's definition as listed, serialized, at most; a larger one is left out.
const MAX_TOOL_BYTES: usize = 64 * 1024;
/// A description is cut (visibly) beyond this.
const MAX_DESCRIPTION_BYTES: usize = 16 * 1024;

/// One upstream's offered tools.
pub struct Catalogue {
    /// The stored catalogue's digest; `None` for the allow-list stand-ins.
    pub digest: Option<String>,
    /// The listing it was built from (`None` for the stand-ins), to build it again when the names
    /// other upstreams take change.
    listing: Option<Arc<Value>>,
    pub tools: Vec<Arc<UpstreamTool>>,
    /// The tools by gatehouse's name for them: every call looks one up.
    by_name: HashMap<String, Arc<UpstreamTool>>,
    /// Its resources, templates and prompts (none for the stand-ins).
    pub offers: Offers,
    stored_offers: Option<Arc<Value>>,
}

/// A stored listing: the tools as the upstream answered `tools/list`, what else it offers, and
/// their digest.
pub struct Listing {
    pub tools: Arc<Value>,
    pub offers: Arc<Value>,
    pub digest: String,
}

/// Which of the lists clients see changed with a new listing.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Changes {
    pub tools: bool,
    pub resources: bool,
    pub prompts: bool,
}

impl Changes {
    pub const ALL: Self = Self {
        tools: true,
        resources: true,
        prompts: true,
    };

    /// What differs from the listing `before` (every list, when there was none) to `record`.
    pub fn between(before: Option<&Listing>, record: &CatalogueRecord) -> Self {
        let Some(before) = before else { return Self::ALL };
        let differs = |keys: &[&str]| {
            keys.iter()
                .any(|key| before.offers.get(*key) != record.offers.get(*key))
        };
        Self {
            tools: *before.tools != record.tools,
            resources: differs(&["resources", "resourceTemplates"]),
            prompts: differs(&["prompts"]),
        }
    }

    pub fn any(self) -> bool {
        self.tools || self.resources || self.prompts
    }
}

impl std::ops::BitOr for Changes {
    type Output = Self;
    fn bitor(self, other: Self) -> Self {
        Self {
            tools: self.tools || other.tools,
            resources: self.resources || other.resources,
            prompts: self.prompts || other.prompts,
        }
    }
}

/// Every upstream's catalogue, with names handed out in one pass: gatehouse's own tools first,
/// then the upstreams in configuration order, and within one listing the first tool of a name; the
/// tool that loses a name is left out and logged. Prompts' names are handed out the same way. So
/// every name is listed once, the tool a call
/// reaches is the one the listing shows, and the outcome is the same on every replica and after
/// every re-listing, whichever upstream listed last. `listing` gives an upstream's listing, when
/// it has one.
pub fn assign(
    upstreams: &[Arc<Upstream>],
    own_tools: &HashSet<String>,
    forms: &Forms,
    core: &Weak<Core>,
    listing: impl Fn(&Upstream) -> Option<Listing>,
) -> HashMap<String, Arc<Catalogue>> {
    let mut taken = own_tools.clone();
    let mut taken_prompts = HashSet::new();
    let mut catalogues = HashMap::new();
    for upstream in upstreams {
        let context = Context {
            forms,
            taken: &taken,
            core: core.clone(),
        };
        let catalogue = match listing(upstream) {
            Some(listing) => {
                let offers = Offers::from_listing(upstream, &listing.offers, &mut taken_prompts);
                let stored_offers = listing.offers.clone();
                let mut catalogue = Catalogue::from_listing(upstream, listing, &context);
                catalogue.offers = offers;
                catalogue.stored_offers = Some(stored_offers);
                catalogue
            }
            None => Catalogue::stand_ins(upstream, &context),
        };
        taken.extend(catalogue.tools.iter().map(|t| t.definition().name.clone()));
        catalogues.insert(upstream.id.clone(), Arc::new(catalogue));
    }
    catalogues
}

/// What the catalogue needs to know of the rest of gatehouse.
struct Context<'a> {
    forms: &'a Forms,
    /// Names taken by gatehouse's own tools and by earlier upstreams.
    taken: &'a HashSet<String>,
    core: Weak<Core>,
}

impl Catalogue {
    /// Until a listing succeeds: the allow-list's names with a placeholder description, or,
    /// without an allow-list, one tool that connects the user and lists the upstream's tools.
    fn stand_ins(upstream: &Arc<Upstream>, context: &Context<'_>) -> Self {
        let Some(allow) = &upstream.allow else {
            return Self::new(None, connect_tool(upstream, context).into_iter().collect());
        };
        let tools = allow
            .iter()
            .filter_map(|name| {
                let listed = json!({
                    "name": name,
                    "description": format!(
                        "A tool of the `{}` server. Its full description appears once a user has connected to it.",
                        upstream.id
                    ),
                    "inputSchema": {"type": "object"},
                });
                tool(upstream, &listed, context)
            })
            .collect();
        Self::new(None, tools)
    }

    /// The tools of a listing.
    fn from_listing(upstream: &Arc<Upstream>, listing: Listing, context: &Context<'_>) -> Self {
        let mut seen = HashSet::new();
        let tools = listing
            .tools
            .as_array()
            .into_iter()
            .flatten()
            .filter(|listed| {
                let fits = serde_json::to_vec(listed).is_ok_and(|bytes| bytes.len() <= MAX_TOOL_BYTES);
                if !fits {
                    tracing::warn!(upstream = %upstream.id, name = ?listed.get("name"), "left out a tool whose definition is larger than {MAX_TOOL_BYTES} bytes");
                }
                fits
            })
            .filter_map(|listed| tool(upstream, listed, context))
            .filter(|tool| {
                let first = seen.insert(tool.definition().name.clone());
                if !first {
                    tracing::warn!(upstream = %upstream.id, tool = %tool.definition().name, "left out a tool the upstream lists twice; the first one stays");
                }
                first
            })
            .take(MAX_TOOLS)
            .collect();
        let mut catalogue = Self::new(Some(listing.digest), tools);
        catalogue.listing = Some(listing.tools);
        catalogue
    }

    fn new(digest: Option<String>, tools: Vec<Arc<UpstreamTool>>) -> Self {
        let by_name = tools.iter().map(|t| (t.definition().name.clone(), t.clone())).collect();
        Self {
            digest,
            listing: None,
            tools,
            by_name,
            offers: Offers::default(),
            stored_offers: None,
        }
    }

    /// The listing it was built from, to build it again.
    pub fn listing(&self) -> Option<Listing> {
        Some(Listing {
            tools: self.listing.clone()?,
            offers: self.stored_offers.clone()?,
            digest: self.digest.clone()?,
        })
    }

    pub fn get(&self, name: &str) -> Option<&Arc<UpstreamTool>> {
        self.by_name.get(name)
    }
}

/// `<prefix>connect`: meets the upstream's requirements (a sign-in, a form), then lists its tools.
fn connect_tool(upstream: &Arc<Upstream>, context: &Context<'_>) -> Option<Arc<UpstreamTool>> {
    let name = upstream.exposed_name("connect");
    if !valid_tool_name(&name) || context.taken.contains(&name) {
        tracing::warn!(upstream = %upstream.id, tool = %name, "cannot offer the tool that connects to the upstream: its name is taken");
        return None;
    }
    let definition = ToolDefinition {
        description: format!(
            "Connects the user to the `{}` MCP server (signing in or filling in what it needs in the browser), \
             then lists its tools. Call this first: the server's tools appear once a user has connected.",
            upstream.id
        ),
        name,
        title: Some(format!("Connect to {}", upstream.id)),
        input_schema: InputSchema::open(),
        read_only: true,
        requires: upstream.requires.clone(),
        elicit: ElicitMode::Error,
        elicit_timeout: upstream.elicit_timeout,
        form_details: Vec::new(),
        listed: None,
        access: upstream.access.clone(),
    };
    Some(Arc::new(UpstreamTool::new(
        upstream.clone(),
        None,
        definition,
        context.core.clone(),
    )))
}

/// gatehouse's tool for one listed tool, or `None` (logged) when it cannot be offered.
fn tool(upstream: &Arc<Upstream>, listed: &Value, context: &Context<'_>) -> Option<Arc<UpstreamTool>> {
    let name = listed.get("name").and_then(Value::as_str)?;
    if !upstream.offers(name) {
        return None;
    }
    let exposed = upstream.exposed_name(name);
    if !valid_tool_name(&exposed) {
        tracing::warn!(upstream = %upstream.id, tool = %text::bounded(name, 200), "left out a tool whose name is not a valid MCP tool name once prefixed");
        return None;
    }
    if context.taken.contains(&exposed) {
        tracing::warn!(upstream = %upstream.id, tool = %exposed, "left out a tool whose name another tool has already; set `prefix`");
        return None;
    }
    let mut shown = listed.clone();
    shown["name"] = json!(exposed);
    let description = listed.get("description").and_then(Value::as_str).unwrap_or("");
    let description = text::bounded(description, MAX_DESCRIPTION_BYTES);
    shown["description"] = json!(description);
    let input_schema = listed
        .get("inputSchema")
        .and_then(|schema| InputSchema::from_config(Some(schema), "inputSchema").ok())
        // An upstream schema gatehouse cannot read is passed on, and the upstream checks.
        .unwrap_or_else(InputSchema::open);
    let requires = upstream.requirements_of(name);
    let forms: Vec<&Form> = requires
        .iter()
        .filter_map(|r| match r {
            Requirement::Form { form } => context.forms.get(form).filter(|f| f.scope == FormScope::Call),
            Requirement::Provider { .. } | Requirement::Approval { .. } => None,
        })
        .collect();
    let form_details = match form_details(
        &forms,
        &input_schema.property_names(),
        &format!("upstreams.{}", upstream.id),
    ) {
        Ok(details) => details,
        Err(error) => {
            tracing::warn!(upstream = %upstream.id, tool = %exposed, %error, "a confirmation form's description names arguments the tool does not have; it is shown without them");
            Vec::new()
        }
    };
    let extra = upstream.overrides.get(name);
    let definition = ToolDefinition {
        name: exposed,
        title: listed.get("title").and_then(Value::as_str).map(str::to_owned),
        description,
        read_only: listed
            .pointer("/annotations/readOnlyHint")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        input_schema,
        requires,
        elicit: extra.map_or(ElicitMode::Error, |e| e.elicit),
        elicit_timeout: extra.map_or(upstream.elicit_timeout, |e| e.elicit_timeout),
        form_details,
        listed: Some(shown),
        access: upstream.access.clone(),
    };
    Some(Arc::new(UpstreamTool::new(
        upstream.clone(),
        Some(name.to_owned()),
        definition,
        context.core.clone(),
    )))
}
