//! Tools: the `Tool` trait, the registry built once from configuration, and the tool kinds. The
//! gate runs a tool as a [`ReadyCall`]; what a tool gives back (`ToolOutcome`, `ToolResult`) is
//! the gate's contract, re-exported here.

mod body;
mod disconnect;
mod http;
mod redact;
mod schema;
mod template;
mod whoami;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use std::collections::BTreeSet;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::audit::Origin;
use crate::config::{Config, ConfigError, ElicitMode};
use crate::domain::Principal;
use crate::forms::{Form, FormScope, Forms};
use crate::gate::{Credentials, Gate, Requirement, RunTool};
use crate::identity::Claims;
use crate::identity::access::Allow;
use crate::providers::Providers;
use crate::secret::Secret;
use crate::store::SessionRecord;

pub use crate::gate::{ToolOutcome, ToolResult};
pub use redact::Redactor;
pub use schema::InputSchema;
pub use template::{Encoding, Placeholders, Template, Values};

/// What a tool is, as `tools/list` shows it.
#[derive(Debug, Clone)]
pub struct ToolDefinition {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    pub input_schema: InputSchema,
    pub read_only: bool,
    pub requires: Vec<Requirement>,
    /// Whether a missing requirement fails the call (-32042) or is asked for within it.
    pub elicit: ElicitMode,
    /// How long an in-call elicitation waits for the user.
    pub elicit_timeout: Duration,
    /// The description of each call-scoped form the tool requires, with the call's arguments.
    pub form_details: Vec<(String, Template)>,
    /// What `tools/list` shows instead of the above, when another server defined the tool (its
    /// schemas, annotations and icons as it listed them, under gatehouse's name for it).
    pub listed: Option<Value>,
    /// Who may see and call the tool (`allow`); everyone when absent.
    pub access: Option<Allow>,
}

impl ToolDefinition {
    /// A tool of gatehouse's own, which needs nothing from the gate and is open to everyone.
    pub fn builtin(
        name: &str,
        title: Option<&str>,
        description: &str,
        input_schema: InputSchema,
        read_only: bool,
    ) -> Self {
        Self {
            name: name.to_owned(),
            title: title.map(str::to_owned),
            description: description.to_owned(),
            input_schema,
            read_only,
            requires: Vec::new(),
            elicit: ElicitMode::Error,
            elicit_timeout: Duration::ZERO,
            form_details: Vec::new(),
            listed: None,
            access: None,
        }
    }

    /// Whether a caller with these claims may see and call the tool.
    pub fn permits(&self, claims: &Claims) -> bool {
        self.access.as_ref().is_none_or(|access| access.permits(claims))
    }

    pub fn to_json(&self) -> Value {
        if let Some(listed) = &self.listed {
            return listed.clone();
        }
        let mut tool = json!({
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema.as_json(),
            "annotations": {"readOnlyHint": self.read_only},
        });
        if let Some(title) = &self.title {
            tool["title"] = json!(title);
            tool["annotations"]["title"] = json!(title);
        }
        tool
    }

    /// The call-scoped forms' descriptions for these arguments, by form id, with bidi controls and
    /// invisible characters in the arguments shown as code points (`U+202E`).
    pub fn form_details(&self, arguments: &Map<String, Value>) -> HashMap<String, String> {
        let forms = HashMap::new();
        let values = Values {
            arguments,
            forms: &forms,
        };
        self.form_details
            .iter()
            .filter_map(|(form, template)| {
                Some((form.clone(), template.render(&values, template::Encoding::Shown).ok()?))
            })
            .collect()
    }
}

/// A call's arguments, as the client sent them.
pub type Arguments = Map<String, Value>;

/// What a running call may say to its client while it runs, on the call's own stream.
#[async_trait]
pub trait CallStream: Send + Sync {
    /// Sends a notification; false when the client has gone away.
    async fn notify(&self, method: &str, params: Value) -> bool;

    /// Sends a request and waits for the client's answer: `Ok(result)` or `Err(error object)`.
    /// `None` when the client went away first.
    async fn request(&self, method: &str, params: Value) -> Option<Result<Value, Value>>;

    /// Completes when the client has gone away.
    async fn gone(&self);
}

/// An upstream MCP server as `whoami` shows it.
pub struct Offering {
    pub id: String,
    pub tools: usize,
    pub requires: Vec<Requirement>,
}

/// The upstream servers on offer (implemented by the upstreams, which build on the tools).
pub trait Offerings: Send + Sync {
    fn offerings(&self) -> Vec<Offering>;

    /// Ends the principal's upstream sessions: credentials they were opened with are gone.
    fn end_sessions_of(&self, principal: &Principal);
}

/// Who is calling, through which session, from where, and what the call may say to its client.
pub struct CallContext<'a> {
    pub principal: &'a Principal,
    pub session: &'a SessionRecord,
    pub gate: &'a Gate,
    /// The call's own stream, when its answer is streamed.
    pub stream: Option<Arc<dyn CallStream>>,
    /// The client's `progressToken` for this call.
    pub progress_token: Option<&'a Value>,
    /// Cancelled when the client cancels the call (`notifications/cancelled`).
    pub cancelled: &'a CancellationToken,
    pub offerings: &'a dyn Offerings,
    /// On a 2026-07-28 retry: what the client answered to the tool's input requests.
    pub input: Option<&'a ToolInput>,
    /// Where the call came from, for the audit trail.
    pub from: &'a Origin,
    /// The caller's verified access token (`oauth` mode), for upstreams that exchange it.
    pub access_token: Option<&'a Secret<String>>,
}

/// A call of `tool`, ready to run but for the credentials, which the gate lends it when it runs it.
pub struct ReadyCall<'a> {
    pub tool: &'a dyn Tool,
    pub context: CallContext<'a>,
    pub arguments: &'a Arguments,
}

impl RunTool for ReadyCall<'_> {
    /// An approved call runs with the arguments its approvers were shown.
    async fn run(&self, credentials: &Credentials) -> ToolOutcome {
        let arguments = credentials.approved_arguments().unwrap_or(self.arguments);
        self.tool.call(&self.context, credentials, arguments).await
    }
}

/// A 2026-07-28 retry's answers to the input requests of a tool's previous round, with the state
/// the tool kept across it.
#[derive(Debug, Default)]
pub struct ToolInput {
    /// `inputResponses`, by the keys the tool chose.
    pub responses: Map<String, Value>,
    /// What the tool put in its [`ToolOutcome::InputRequired`], back unchanged (sealed meanwhile).
    pub state: Value,
    /// Whether the retry has a place among its principal's held retries on this replica
    /// (`limits.held_retries_per_principal`): only then may it wait for something elsewhere (a
    /// call parked on another replica); without one it is answered at once.
    pub held: bool,
}

#[async_trait]
pub trait Tool: Send + Sync {
    fn definition(&self) -> &ToolDefinition;

    /// Runs the tool with the credentials the gate lent it (every requirement met) and arguments
    /// already checked against its input schema.
    async fn call(&self, context: &CallContext<'_>, credentials: &Credentials, arguments: &Arguments) -> ToolOutcome;

    /// Whether a call may send this session's client something while it runs (progress when
    /// `progress_requested`, log messages, requests the client declared it takes): such a call's
    /// answer streams, so there is a [`CallStream`] to send it on.
    fn sends_during_call(&self, _session: &SessionRecord, _progress_requested: bool) -> bool {
        false
    }
}

/// Call-scoped forms show the call's arguments: their placeholders must name this tool's arguments.
pub fn form_details(
    forms: &[&Form],
    arguments: &BTreeSet<String>,
    key: &str,
) -> Result<Vec<(String, Template)>, ConfigError> {
    let names = Placeholders { arguments, forms: &[] };
    forms
        .iter()
        .filter(|f| f.scope == FormScope::Call)
        .map(|form| {
            let description = form.description.as_deref().unwrap_or(&form.title);
            let template = Template::parse(
                description,
                &format!("{key}.requires (the description of form `{}`)", form.id),
                &names,
            )?;
            Ok((form.id.clone(), template))
        })
        .collect()
}

/// Parses `key.requires`. Nothing can satisfy a provider or a form that is not configured, and
/// running the tool without it would bypass the gate: such a configuration is refused.
pub fn parse_requirements(
    texts: &[String],
    key: &str,
    providers: &Providers,
    forms: &Forms,
) -> Result<Vec<Requirement>, ConfigError> {
    texts
        .iter()
        .enumerate()
        .map(|(j, text)| {
            let requirement_key = format!("{key}.requires[{j}]");
            let requirement =
                Requirement::parse(text).map_err(|e| ConfigError::key(&requirement_key, e.to_string()))?;
            match &requirement {
                Requirement::Provider { provider, .. } if !providers.knows(provider) => Err(ConfigError::key(
                    requirement_key,
                    format!("names provider `{provider}`, which is not configured"),
                )),
                Requirement::Form { form } if forms.get(form).is_none() => Err(ConfigError::key(
                    requirement_key,
                    format!("names form `{form}`, which is not configured"),
                )),
                // An approval's id is checked with the configuration (`config::validate`).
                Requirement::Provider { .. } | Requirement::Form { .. } | Requirement::Approval { .. } => {
                    Ok(requirement)
                }
            }
        })
        .collect()
}

/// Every tool, in a stable order for pagination, found by name.
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
    by_name: HashMap<String, usize>,
}

/// MCP tool names: 1 to 128 of `A-Z a-z 0-9 _ - .`.
pub fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

impl ToolRegistry {
    /// Builds and checks every configured tool; built-ins come first.
    pub fn from_config(
        config: &Config,
        providers: &Providers,
        forms: &Forms,
        client: reqwest::Client,
    ) -> Result<Self, ConfigError> {
        let mut tools: Vec<Arc<dyn Tool>> =
            vec![Arc::new(whoami::Whoami::new()), Arc::new(disconnect::Disconnect::new())];
        for (i, tool) in config.tools.iter().enumerate() {
            let key = format!("tools[{i}]");
            if !valid_tool_name(&tool.name) {
                return Err(ConfigError::key(
                    format!("{key}.name"),
                    format!(
                        "`{}` is not a tool name (1-128 of letters, digits, `_`, `-`, `.`)",
                        tool.name
                    ),
                ));
            }
            if tools.iter().any(|t| t.definition().name == tool.name) {
                return Err(ConfigError::key(
                    format!("{key}.name"),
                    format!("a tool named `{}` already exists", tool.name),
                ));
            }
            let requires = parse_requirements(&tool.requires, &key, providers, forms)?;
            let required_forms: Vec<&Form> = requires
                .iter()
                .filter_map(|r| match r {
                    Requirement::Form { form } => forms.get(form),
                    Requirement::Provider { .. } | Requirement::Approval { .. } => None,
                })
                .collect();
            let input_schema = InputSchema::from_config(tool.input_schema.as_ref(), &format!("{key}.input_schema"))?;
            let arguments = input_schema.property_names();
            let form_details = form_details(&required_forms, &arguments, &key)?;
            let definition = ToolDefinition {
                name: tool.name.clone(),
                title: tool.title.clone(),
                description: tool.description.clone(),
                input_schema,
                read_only: false,
                requires,
                elicit: tool.elicit,
                elicit_timeout: tool.elicit_timeout.unwrap_or(config.elicitation.wait),
                form_details,
                listed: None,
                access: tool.allow.as_ref().map(Allow::from_config),
            };
            tools.push(Arc::new(http::HttpTool::from_config(
                tool,
                definition,
                &required_forms,
                &key,
                providers,
                client.clone(),
            )?));
        }
        let by_name = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.definition().name.clone(), i))
            .collect();
        Ok(Self { tools, by_name })
    }

    /// Adds `extra` after the others; a name already taken is refused, naming `key`.
    pub fn with(mut self, extra: Vec<Arc<dyn Tool>>, key: &str) -> Result<Self, ConfigError> {
        for tool in extra {
            let name = tool.definition().name.clone();
            if self.by_name.contains_key(&name) {
                return Err(ConfigError::key(key, format!("a tool named `{name}` already exists")));
            }
            self.by_name.insert(name, self.tools.len());
            self.tools.push(tool);
        }
        Ok(self)
    }

    /// Every tool's name.
    pub fn names(&self) -> std::collections::HashSet<String> {
        self.by_name.keys().cloned().collect()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name).map(|&i| &self.tools[i])
    }

    /// Every tool, built-ins first.
    pub fn all(&self) -> &[Arc<dyn Tool>] {
        &self.tools
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::ConfigSource;

    fn config(toml: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("g.toml");
        std::fs::write(&path, toml).expect("write");
        Config::load(ConfigSource {
            file: Some(&path),
            env: &BTreeMap::new(),
        })
    }

    fn registry(toml: &str) -> Result<ToolRegistry, ConfigError> {
        let config = config(toml)?;
        ToolRegistry::from_config(
            &config,
            &Providers::from_config(&config)?,
            &Forms::from_config(&config.forms)?,
            reqwest::Client::new(),
        )
    }

    fn refusal(toml: &str) -> ConfigError {
        match registry(toml) {
            Ok(_) => panic!("configuration should be refused:\n{toml}"),
            Err(error) => error,
        }
    }

    fn key_of(error: ConfigError) -> String {
        match error {
            ConfigError::Key { key, .. } => key,
            other => panic!("expected a key error, got {other}"),
        }
    }

    const TOOL: &str =
        "[[tools]]\nname = \"weather\"\ndescription = \"d\"\n[tools.http]\nurl = \"https://api.test/w\"\n";

    #[test]
    fn builds_configured_tools_after_the_builtins() {
        let registry = registry(TOOL).expect("registry");
        assert_eq!(registry.len(), 3);
        assert!(registry.get("whoami").is_some());
        assert_eq!(
            registry.get("weather").expect("tool").definition().to_json()["annotations"]["readOnlyHint"],
            json!(true)
        );
    }

    #[test]
    fn refuses_bad_tool_definitions_naming_the_key() {
        assert_eq!(key_of(refusal(&TOOL.replace("weather", "whoami"))), "tools[0].name");
        assert_eq!(key_of(refusal(&TOOL.replace("weather", "bad name"))), "tools[0].name");
        assert_eq!(key_of(refusal(&format!("{TOOL}{TOOL}"))), "tools[1].name");
        let requires = TOOL.replace("description", "requires = [\"github\"]\ndescription");
        assert_eq!(key_of(refusal(&requires)), "tools[0].requires[0]");
        let malformed = TOOL.replace("description", "requires = [\"git hub\"]\ndescription");
        assert_eq!(key_of(refusal(&malformed)), "tools[0].requires[0]");
    }
}
