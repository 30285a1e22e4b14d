//! One configured upstream MCP server, parsed and checked once at start: how to reach it, what
//! its calls require, which of its tools are offered and under which names.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use reqwest::header::HeaderName;
use url::{Origin, Url};

use crate::config::{Config, ConfigError, ElicitMode, IdentityMode, UpstreamAuth, UpstreamConfig, is_scope_token};
use crate::domain::is_identifier;
use crate::forms::{Form, Forms};
use crate::gate::Requirement;
use crate::identity::access::Allow;
use crate::providers::Providers;
use crate::tools::{Placeholders, Template, parse_requirements, valid_tool_name};

/// Headers gatehouse sets itself on requests to an upstream: configured headers may not replace them.
const RESERVED_HEADERS: [&str; 6] = [
    "authorization",
    "mcp-session-id",
    "mcp-protocol-version",
    "accept",
    "content-type",
    "last-event-id",
];

/// How gatehouse reaches an upstream.
pub enum Transport {
    /// Streamable HTTP, with extra headers rendered from the user's form values.
    Http {
        url: Url,
        headers: Vec<(HeaderName, Template)>,
        /// HTTP sessions held at once for this upstream, across users; the least recently used
        /// idle one closes for a new one.
        max_sessions: usize,
    },
    /// A process per user speaking stdio, its environment rendered from the user's form values.
    Stdio {
        program: String,
        args: Vec<String>,
        env: Vec<(String, Template)>,
        max_processes: usize,
    },
}

/// Per-tool settings on top of the upstream's.
pub struct Override {
    pub requires: Vec<Requirement>,
    pub elicit: ElicitMode,
    pub elicit_timeout: Duration,
}

pub struct Upstream {
    pub id: String,
    /// What gatehouse puts in front of its resources' URIs (see `offers`).
    pub tag: String,
    pub prefix: String,
    pub transport: Transport,
    pub requires: Vec<Requirement>,
    /// The provider whose access token goes as `Authorization: Bearer` (the first required).
    pub bearer: Option<String>,
    /// `auth = "token_exchange"`: the bearer is the caller's own access token exchanged for one
    /// meant for the upstream (RFC 8693).
    pub exchange: Option<Exchange>,
    /// When set, only these tools (the upstream's names) are offered.
    pub allow: Option<BTreeSet<String>>,
    /// Who may see and call its tools, by claims.
    pub access: Option<Allow>,
    pub timeout: Duration,
    pub idle_timeout: Duration,
    pub overrides: HashMap<String, Override>,
    /// How long an in-call elicitation waits by default.
    pub elicit_timeout: Duration,
    /// The origins its URL elicitations may send users to; any http or https origin when `None`.
    pub elicitation_origins: Option<Vec<Origin>>,
}

/// What a token exchange for the upstream asks the identity provider for.
pub struct Exchange {
    /// Sent as both `audience` and `resource` (RFC 8693 2.1).
    pub audience: String,
    pub scopes: Vec<String>,
    /// Whether a user the identity provider wants to interact is sent through a sign-in there,
    /// with `[identity]`'s client (see `providers::remote`).
    pub sign_in: bool,
}

/// HTTP sessions per upstream held at once unless the upstream is a process (`max_processes`).
const MAX_HTTP_SESSIONS: usize = 10_000;

impl Upstream {
    /// Whether a session with it needs a user's credentials (a provider's token, a form, or the
    /// caller's own token to exchange); one that needs none is listed through gatehouse's own.
    pub fn needs_credentials(&self) -> bool {
        !self.requires.is_empty() || self.exchange.is_some()
    }

    pub fn offers(&self, tool: &str) -> bool {
        self.allow.as_ref().is_none_or(|allow| allow.contains(tool))
    }

    /// gatehouse's name for the upstream's tool `tool`.
    pub fn exposed_name(&self, tool: &str) -> String {
        format!("{}{tool}", self.prefix)
    }

    /// Every requirement of a call to `tool`: the upstream's, then the tool's own.
    pub fn requirements_of(&self, tool: &str) -> Vec<Requirement> {
        let mut requires = self.requires.clone();
        if let Some(extra) = self.overrides.get(tool) {
            requires.extend(
                extra
                    .requires
                    .iter()
                    .filter(|r| !requires.contains(r))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
        }
        requires
    }

    pub fn from_config(
        upstream: &UpstreamConfig,
        key: &str,
        config: &Config,
        providers: &Providers,
        forms: &Forms,
    ) -> Result<Self, ConfigError> {
        if !is_identifier(&upstream.id) {
            return Err(ConfigError::key(
                format!("{key}.id"),
                format!("`{}` is not an id (letters, digits, `-` and `_`)", upstream.id),
            ));
        }
        let requires = parse_requirements(&upstream.requires, key, providers, forms)?;
        let required_forms: Vec<&Form> = form_requirements(&requires, forms);
        let arguments = BTreeSet::new();
        let names = Placeholders {
            arguments: &arguments,
            forms: &required_forms,
        };
        let transport = match (&upstream.url, &upstream.command) {
            (Some(url), None) => http_transport(upstream, url, key, &names)?,
            (None, Some(command)) => stdio_transport(upstream, command, key, &names)?,
            _ => {
                return Err(ConfigError::key(
                    key,
                    "needs exactly one of `url` (Streamable HTTP) and `command` (stdio)",
                ));
            }
        };
        let prefix = upstream.prefix.clone().unwrap_or_else(|| format!("{}_", upstream.id));
        if !prefix.is_empty() && !valid_tool_name(&prefix) {
            return Err(ConfigError::key(
                format!("{key}.prefix"),
                "may hold only letters, digits, `_`, `-` and `.`",
            ));
        }
        let allow = match &upstream.tools {
            None => None,
            Some(tools) => {
                for (i, tool) in tools.iter().enumerate() {
                    if !valid_tool_name(&format!("{prefix}{tool}")) {
                        return Err(ConfigError::key(
                            format!("{key}.tools[{i}]"),
                            format!("`{prefix}{tool}` is not a tool name (1-128 of letters, digits, `_`, `-`, `.`)"),
                        ));
                    }
                }
                Some(tools.iter().cloned().collect())
            }
        };
        if upstream.timeout.is_zero() {
            return Err(ConfigError::key(format!("{key}.timeout"), "must be longer than zero"));
        }
        if upstream.idle_timeout.is_zero() {
            return Err(ConfigError::key(
                format!("{key}.idle_timeout"),
                "must be longer than zero",
            ));
        }
        let mut overrides = HashMap::new();
        for (i, extra) in upstream.overrides.iter().enumerate() {
            let override_key = format!("{key}.overrides[{i}]");
            let tool_requires = parse_requirements(&extra.requires, &override_key, providers, forms)?;
            if overrides.contains_key(&extra.tool) {
                return Err(ConfigError::key(
                    format!("{override_key}.tool"),
                    format!("`{}` has an override already", extra.tool),
                ));
            }
            overrides.insert(
                extra.tool.clone(),
                Override {
                    requires: tool_requires,
                    elicit: extra.elicit,
                    elicit_timeout: extra.elicit_timeout.unwrap_or(config.elicitation.wait),
                },
            );
        }
        let mut requires = requires;
        let bearer = requires.iter().find_map(|r| match r {
            Requirement::Provider { provider, .. } => Some(provider.clone()),
            Requirement::Form { .. } | Requirement::Approval { .. } => None,
        });
        let exchange = exchange(upstream, key, config, bearer.as_deref())?;
        let bearer = match (upstream.auth, bearer) {
            (Some(UpstreamAuth::Mcp), Some(provider)) => {
                return Err(ConfigError::key(
                    format!("{key}.auth"),
                    format!(
                        "`mcp` cannot go with `requires` naming the provider `{provider}`: both would be the bearer token"
                    ),
                ));
            }
            // The server's own sign-in comes first, under the upstream's id (see `providers::remote`).
            (Some(UpstreamAuth::Mcp), None) => {
                requires.insert(
                    0,
                    Requirement::Provider {
                        provider: upstream.id.clone(),
                        scopes: Vec::new(),
                    },
                );
                Some(upstream.id.clone())
            }
            (_, bearer) => bearer,
        };
        Ok(Self {
            id: upstream.id.clone(),
            tag: super::offers::uri_tag(&upstream.id),
            prefix,
            transport,
            requires,
            bearer,
            exchange,
            allow,
            access: upstream.allow.as_ref().map(Allow::from_config),
            timeout: upstream.timeout,
            idle_timeout: upstream.idle_timeout,
            overrides,
            elicit_timeout: config.elicitation.wait,
            elicitation_origins: elicitation_origins(upstream, key)?,
        })
    }
}

/// `auth = "token_exchange"` with its `audience` and `scopes`: only for an HTTP upstream, in
/// `identity.mode = "oauth"`, and when no provider's token already goes as the bearer.
fn exchange(
    upstream: &UpstreamConfig,
    key: &str,
    config: &Config,
    bearer: Option<&str>,
) -> Result<Option<Exchange>, ConfigError> {
    let Some(UpstreamAuth::TokenExchange) = upstream.auth else {
        if upstream.audience.is_some() {
            return Err(ConfigError::key(key, "`audience` is for `auth = \"token_exchange\"`"));
        }
        if upstream.auth.is_none() && !upstream.scopes.is_empty() {
            return Err(ConfigError::key(
                key,
                "`scopes` are for `auth = \"token_exchange\"` and `auth = \"mcp\"`",
            ));
        }
        return Ok(None);
    };
    let auth_key = format!("{key}.auth");
    if config.identity.mode != IdentityMode::OAuth {
        return Err(ConfigError::key(
            auth_key,
            "`token_exchange` exchanges the caller's access token, so it needs identity.mode = \"oauth\"",
        ));
    }
    let Some(url) = &upstream.url else {
        return Err(ConfigError::key(auth_key, "`token_exchange` is for `url` upstreams"));
    };
    if let Some(provider) = bearer {
        return Err(ConfigError::key(
            auth_key,
            format!(
                "`token_exchange` cannot go with `requires` naming the provider `{provider}`: both would be the bearer token"
            ),
        ));
    }
    let audience = upstream.audience.clone().unwrap_or_else(|| url.clone());
    if audience.trim().is_empty() {
        return Err(ConfigError::key(format!("{key}.audience"), "must not be empty"));
    }
    if let Some(scope) = upstream.scopes.iter().find(|s| !is_scope_token(s)) {
        return Err(ConfigError::key(
            format!("{key}.scopes"),
            format!("`{scope}` is not a scope (RFC 6749: printable ASCII without space, quote or backslash)"),
        ));
    }
    Ok(Some(Exchange {
        audience,
        scopes: upstream.scopes.clone(),
        sign_in: config.identity.client_id.is_some(),
    }))
}

/// `elicitation_origins`: each an http or https origin, written without a path.
fn elicitation_origins(upstream: &UpstreamConfig, key: &str) -> Result<Option<Vec<Origin>>, ConfigError> {
    let Some(origins) = &upstream.elicitation_origins else {
        return Ok(None);
    };
    origins
        .iter()
        .enumerate()
        .map(|(i, origin)| {
            Url::parse(origin)
                .ok()
                .filter(|u| {
                    matches!(u.scheme(), "http" | "https")
                        && u.host_str().is_some()
                        && u.path() == "/"
                        && u.query().is_none()
                        && u.fragment().is_none()
                        && u.username().is_empty()
                        && u.password().is_none()
                })
                .map(|u| u.origin())
                .ok_or_else(|| {
                    ConfigError::key(
                        format!("{key}.elicitation_origins[{i}]"),
                        format!("`{origin}` is not an origin such as https://auth.example.com"),
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn form_requirements<'a>(requires: &[Requirement], forms: &'a Forms) -> Vec<&'a Form> {
    requires
        .iter()
        .filter_map(|r| match r {
            Requirement::Form { form } => forms.get(form),
            Requirement::Provider { .. } | Requirement::Approval { .. } => None,
        })
        .collect()
}

fn http_transport(
    upstream: &UpstreamConfig,
    url: &str,
    key: &str,
    names: &Placeholders<'_>,
) -> Result<Transport, ConfigError> {
    let url = Url::parse(url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
        .ok_or_else(|| ConfigError::key(format!("{key}.url"), "must be an http or https URL"))?;
    if !upstream.env.is_empty() {
        return Err(ConfigError::key(format!("{key}.env"), "is for `command` upstreams"));
    }
    let mut headers = Vec::new();
    for (name, value) in &upstream.headers {
        let header_key = format!("{key}.headers.{name}");
        let parsed = HeaderName::try_from(name.as_str())
            .map_err(|_| ConfigError::key(&header_key, "is not a valid header name"))?;
        if RESERVED_HEADERS.contains(&parsed.as_str()) {
            return Err(ConfigError::key(
                header_key,
                "is set by gatehouse itself (the bearer token goes there when the upstream requires a provider)",
            ));
        }
        headers.push((parsed, Template::parse(value, &header_key, names)?));
    }
    Ok(Transport::Http {
        url,
        headers,
        max_sessions: MAX_HTTP_SESSIONS,
    })
}

fn stdio_transport(
    upstream: &UpstreamConfig,
    command: &[String],
    key: &str,
    names: &Placeholders<'_>,
) -> Result<Transport, ConfigError> {
    let Some((program, args)) = command.split_first().filter(|(program, _)| !program.is_empty()) else {
        return Err(ConfigError::key(
            format!("{key}.command"),
            "must name a program, then its arguments",
        ));
    };
    if !upstream.headers.is_empty() {
        return Err(ConfigError::key(format!("{key}.headers"), "is for `url` upstreams"));
    }
    if upstream.max_processes == 0 {
        return Err(ConfigError::key(format!("{key}.max_processes"), "must be at least 1"));
    }
    let mut env = Vec::new();
    for (name, value) in &upstream.env {
        let env_key = format!("{key}.env.{name}");
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(ConfigError::key(env_key, "is not an environment variable name"));
        }
        env.push((name.clone(), Template::parse(value, &env_key, names)?));
    }
    Ok(Transport::Stdio {
        program: program.clone(),
        args: args.to_vec(),
        env,
        max_processes: upstream.max_processes,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::ConfigSource;

    const OAUTH: &str =
        "[identity]\nmode = \"oauth\"\nissuer = \"https://idp.example.com\"\nclient_id = \"gatehouse\"\n";
    const PROVIDER: &str = "[[providers]]\nid = \"hub\"\nauthorize_url = \"https://hub.example.com/a\"\n\
        token_url = \"https://hub.example.com/t\"\nclient_id = \"c\"\nclient_secret = \"s\"\nscopes = [\"repo\"]\n";

    /// The one upstream `upstream` (TOML keys) under `rest`, parsed, or the key its error names.
    fn parsed(rest: &str, upstream: &str) -> Result<Upstream, String> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("gatehouse.toml");
        std::fs::write(&path, format!("{rest}\n[[upstreams]]\nid = \"docs\"\n{upstream}\n")).expect("write");
        let config = Config::load(ConfigSource {
            file: Some(&path),
            env: &BTreeMap::new(),
        })
        .expect("config");
        let key = |e: ConfigError| match e {
            ConfigError::Key { key, .. } => key,
            other => other.to_string(),
        };
        let providers = Providers::from_config(&config).map_err(key)?;
        let forms = Forms::from_config(&config.forms).expect("forms");
        Upstream::from_config(&config.upstreams[0], "upstreams[0]", &config, &providers, &forms).map_err(key)
    }

    #[test]
    fn an_mcp_upstream_needs_its_own_sign_in_named_by_its_id() {
        let url = "url = \"https://docs.example.com/mcp\"\nauth = \"mcp\"";
        let upstream = parsed("", url).expect("upstream");
        assert_eq!(upstream.bearer.as_deref(), Some("docs"));
        assert_eq!(
            upstream.requires,
            [Requirement::Provider {
                provider: "docs".into(),
                scopes: vec![]
            }]
        );
        assert!(upstream.needs_credentials() && upstream.exchange.is_none());
        let with_client = format!("{url}\nclient_id = \"pre\"\nclient_secret = \"s\"\nscopes = [\"read\"]");
        assert!(parsed("", &with_client).is_ok());
        let refused = [
            ("", "command = [\"server\"]\nauth = \"mcp\"", "upstreams[0].auth"),
            (PROVIDER, &format!("{url}\nrequires = [\"hub\"]"), "upstreams[0].auth"),
            (
                "",
                &format!("{url}\nclient_secret = \"s\""),
                "upstreams[0].client_secret",
            ),
            ("", &format!("{url}\nclient_id = \" \""), "upstreams[0].client_id"),
            ("", &format!("{url}\nscopes = [\"a b\"]"), "upstreams[0].scopes"),
            ("", &format!("{url}\naudience = \"x\""), "upstreams[0]"),
            (
                "",
                "url = \"ftp://docs.example.com/mcp\"\nauth = \"mcp\"",
                "upstreams[0].url",
            ),
            (
                "",
                "url = \"https://docs.example.com/mcp\"\nclient_id = \"pre\"",
                "upstreams[0]",
            ),
            (
                "[[providers]]\nid = \"docs\"\nauthorize_url = \"https://d.example.com/a\"\ntoken_url = \"https://d.example.com/t\"\nclient_id = \"c\"\nclient_secret = \"s\"",
                url,
                "upstreams[0].id",
            ),
        ];
        for (rest, upstream, key) in refused {
            assert_eq!(parsed(rest, upstream).err().as_deref(), Some(key), "{upstream}");
        }
    }

    #[test]
    fn token_exchange_asks_for_the_upstream_url_unless_told_otherwise() {
        let url = "url = \"https://docs.example.com/mcp\"\nauth = \"token_exchange\"";
        let upstream = parsed(OAUTH, url).expect("upstream");
        let exchange = upstream.exchange.as_ref().expect("exchange");
        assert_eq!(exchange.audience, "https://docs.example.com/mcp");
        assert!(exchange.scopes.is_empty() && upstream.needs_credentials() && upstream.bearer.is_none());
        let told = parsed(
            OAUTH,
            &format!("{url}\naudience = \"docs-api\"\nscopes = [\"docs:read\"]"),
        )
        .expect("upstream");
        let exchange = told.exchange.as_ref().expect("exchange");
        assert_eq!(
            (exchange.audience.as_str(), exchange.scopes.as_slice()),
            ("docs-api", &["docs:read".to_owned()][..])
        );
        assert!(
            parsed(OAUTH, "url = \"https://docs.example.com/mcp\"")
                .expect("plain")
                .exchange
                .is_none()
        );
    }

    #[test]
    fn token_exchange_is_refused_where_it_cannot_work() {
        let url = "url = \"https://docs.example.com/mcp\"";
        let exchange = format!("{url}\nauth = \"token_exchange\"");
        let local = "[server]\nbind = \"127.0.0.1:8080\"";
        assert_eq!(parsed(local, &exchange).err().as_deref(), Some("upstreams[0].auth"));
        assert_eq!(
            parsed(
                &format!("{OAUTH}\n{PROVIDER}"),
                &format!("{exchange}\nrequires = [\"hub\"]")
            )
            .err()
            .as_deref(),
            Some("upstreams[0].auth")
        );
        assert_eq!(
            parsed(OAUTH, "command = [\"server\"]\nauth = \"token_exchange\"")
                .err()
                .as_deref(),
            Some("upstreams[0].auth")
        );
        assert_eq!(
            parsed(OAUTH, &format!("{exchange}\nscopes = [\"a b\"]"))
                .err()
                .as_deref(),
            Some("upstreams[0].scopes")
        );
        assert_eq!(
            parsed(OAUTH, &format!("{exchange}\naudience = \" \"")).err().as_deref(),
            Some("upstreams[0].audience")
        );
        assert_eq!(
            parsed(OAUTH, &format!("{url}\nscopes = [\"a\"]")).err().as_deref(),
            Some("upstreams[0]")
        );
    }
}
