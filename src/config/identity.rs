//! `[identity]`: who the caller is. `local` (one user at this machine), `header` (a trusted reverse
//! proxy names the user) or `oauth` (MCP authorization: gatehouse is an OAuth-protected resource of
//! an identity provider, and its pages sign browsers in at the same provider with OpenID Connect).
//! Also the `allow` rules that `[[tools]]` and `[[upstreams]]` carry.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use url::Url;

use super::ConfigError;
use super::duration::{DurationText, duration, duration_text};
use crate::domain::PrincipalForm;
use crate::secret::Secret;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum IdentityMode {
    /// One user: the person at this machine. Only allowed when bound to loopback.
    Local,
    /// The principal is a header set by a trusted reverse proxy.
    Header,
    /// MCP authorization: bearer tokens from `issuer`, and OpenID Connect sign-in for the pages.
    #[serde(rename = "oauth")]
    OAuth,
}

impl fmt::Display for IdentityMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IdentityMode::Local => "local",
            IdentityMode::Header => "header",
            IdentityMode::OAuth => "oauth",
        })
    }
}

/// Who the caller is.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct IdentityConfig {
    /// `local` (one user at this machine, loopback only), `header` (a trusted reverse proxy names
    /// the user) or `oauth` (MCP authorization).
    pub mode: IdentityMode,
    /// The header carrying the principal in `header` mode.
    pub header: String,
    /// `header` mode: a header with the user's groups, comma-separated (oauth2-proxy's
    /// `X-Forwarded-Groups`), read as the claim `groups` by `allow` rules.
    #[schemars(example = &"X-Forwarded-Groups")]
    pub groups_header: Option<String>,
    /// `header` mode: a header with the user's email (oauth2-proxy's `X-Forwarded-Email`), read as
    /// the claim `email` by `allow` rules.
    #[schemars(example = &"X-Forwarded-Email")]
    pub email_header: Option<String>,
    /// The principal's name in `local` mode.
    pub local_principal: String,
    /// `oauth` mode: the authorization server (RFC 8414 metadata, else OpenID discovery); https
    /// (http only on loopback), without query or fragment. Required in `oauth` mode.
    #[schemars(example = &"https://keycloak.example.com/realms/acme")]
    pub issuer: Option<Url>,
    /// `oauth` mode: the `aud` access tokens must carry; `public_url` + `/mcp` when absent.
    #[schemars(example = &"https://gatehouse.example.com/mcp")]
    pub audience: Option<String>,
    /// `oauth` mode: scopes every MCP request's token must carry; advertised as `scopes_supported`.
    #[schemars(example = ["mcp"])]
    pub scopes: Vec<String>,
    /// `oauth` mode: the pages' own OpenID Connect client at `issuer`. Required in `oauth` mode.
    #[schemars(example = &"gatehouse")]
    pub client_id: Option<String>,
    /// `oauth` mode: the client's secret; absent for a public client (PKCE alone). Required with
    /// `introspection`.
    #[schemars(example = &"env:GATEHOUSE_IDP_SECRET")]
    pub client_secret: Option<Secret<String>>,
    /// The token claim naming the user; the principal is `issuer` + `#` + its value.
    pub principal_claim: String,
    /// Opaque (non-JWT) access tokens are checked by RFC 7662 introspection, as the pages' client.
    pub introspection: bool,
    /// A token signed with a key id the cached key set lacks fetches the set again, at most once
    /// this often (key rotation works; a flood of made-up key ids cannot hammer the provider).
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    #[schemars(with = "DurationText")]
    pub jwks_refresh_interval: Duration,
    /// How long a browser stays signed in to the pages (at least 1m).
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    #[schemars(with = "DurationText")]
    pub browser_session_ttl: Duration,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        Self {
            mode: IdentityMode::Local,
            header: "X-Forwarded-User".to_owned(),
            groups_header: None,
            email_header: None,
            local_principal: "local".to_owned(),
            issuer: None,
            audience: None,
            scopes: Vec::new(),
            client_id: None,
            client_secret: None,
            principal_claim: "sub".to_owned(),
            introspection: false,
            jwks_refresh_interval: Duration::from_secs(30),
            browser_session_ttl: Duration::from_secs(12 * 3600),
        }
    }
}

/// `allow = { groups = ["eng"], email = ["*@acme.com"] }`: claim name → accepted values, `*`
/// matching any run of characters. Any listed claim matching grants; absent means everyone.
pub type AllowConfig = BTreeMap<String, Vec<String>>;

impl IdentityConfig {
    pub(super) fn validate(&self, loopback: bool, has_trusted_proxies: bool) -> Result<(), ConfigError> {
        match self.mode {
            IdentityMode::Local if !loopback => {
                return Err(ConfigError::key(
                    "identity.mode",
                    "`local` trusts whoever can reach the port, so it needs server.bind on a loopback address; \
                     use `header` behind a reverse proxy, or `oauth`",
                ));
            }
            IdentityMode::Local if self.local_principal.trim().is_empty() => {
                return Err(ConfigError::key("identity.local_principal", "must not be empty"));
            }
            IdentityMode::Local => {}
            IdentityMode::Header => {
                let headers = [
                    ("identity.header", Some(&self.header)),
                    ("identity.groups_header", self.groups_header.as_ref()),
                    ("identity.email_header", self.email_header.as_ref()),
                ];
                for (key, name) in headers {
                    if let Some(name) = name
                        && axum::http::HeaderName::try_from(name.as_str()).is_err()
                    {
                        return Err(ConfigError::key(key, "is not a valid header name"));
                    }
                }
                if !has_trusted_proxies {
                    return Err(ConfigError::key(
                        "server.trusted_proxies",
                        "must list the reverse proxy's addresses in `header` identity mode, \
                         otherwise anyone could claim to be anyone",
                    ));
                }
            }
            IdentityMode::OAuth => self.validate_oauth()?,
        }
        Ok(())
    }

    fn validate_oauth(&self) -> Result<(), ConfigError> {
        let Some(issuer) = &self.issuer else {
            return Err(ConfigError::key("identity.issuer", "is required in `oauth` mode"));
        };
        let loopback_host = matches!(
            issuer.host(),
            Some(url::Host::Ipv4(ip)) if ip.is_loopback()
        ) || matches!(issuer.host(), Some(url::Host::Ipv6(ip)) if ip.is_loopback())
            || issuer.host_str() == Some("localhost");
        if !(issuer.scheme() == "https" || (issuer.scheme() == "http" && loopback_host))
            || issuer.query().is_some()
            || issuer.fragment().is_some()
        {
            return Err(ConfigError::key(
                "identity.issuer",
                "must be an https URL without query or fragment (http only on loopback, for development)",
            ));
        }
        if self.audience.as_deref().is_some_and(|a| a.trim().is_empty()) {
            return Err(ConfigError::key("identity.audience", "must not be empty"));
        }
        if let Some(scope) = self.scopes.iter().find(|s| !is_scope_token(s)) {
            return Err(ConfigError::key(
                "identity.scopes",
                format!("`{scope}` is not a scope (RFC 6749: printable ASCII without space, quote or backslash)"),
            ));
        }
        if self.client_id.as_deref().is_none_or(|id| id.trim().is_empty()) {
            return Err(ConfigError::key(
                "identity.client_id",
                "is required in `oauth` mode: the pages sign browsers in with it (OpenID Connect)",
            ));
        }
        if self.principal_claim.trim().is_empty() {
            return Err(ConfigError::key("identity.principal_claim", "must not be empty"));
        }
        if self.introspection && self.client_secret.is_none() {
            return Err(ConfigError::key(
                "identity.client_secret",
                "is required with identity.introspection: the introspection endpoint wants a confidential client",
            ));
        }
        if self.browser_session_ttl < Duration::from_secs(60) {
            return Err(ConfigError::key("identity.browser_session_ttl", "must be at least 1m"));
        }
        Ok(())
    }
}

/// RFC 6749 3.3: `scope-token = 1*( %x21 / %x23-5B / %x5D-7E )`.
pub fn is_scope_token(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
}

/// A rule is well formed, and names only claims the identity mode's callers can carry.
pub(super) fn check_allow(
    key: &str,
    allow: Option<&AllowConfig>,
    identity: &IdentityConfig,
) -> Result<(), ConfigError> {
    let Some(allow) = allow else { return Ok(()) };
    if allow.is_empty() {
        return Err(ConfigError::key(
            key,
            "names no claim; leave `allow` out to let everyone use the tool",
        ));
    }
    for (claim, values) in allow {
        if claim.trim().is_empty() || values.is_empty() || values.iter().any(|v| v.is_empty()) {
            return Err(ConfigError::key(
                format!("{key}.{claim}"),
                "must be a non-empty list of non-empty values",
            ));
        }
        if let Some(carried) = identity.carried_claims()
            && !carried.contains(&claim.as_str())
        {
            return Err(ConfigError::key(
                format!("{key}.{claim}"),
                format!(
                    "can never match: a caller in `{}` identity mode carries only the claims {}{}",
                    identity.mode,
                    carried.join(", "),
                    match (identity.mode, claim.as_str()) {
                        (IdentityMode::Header, "groups") => " (set identity.groups_header to read `groups`)",
                        (IdentityMode::Header, "email") => " (set identity.email_header to read `email`)",
                        _ => "",
                    }
                ),
            ));
        }
    }
    Ok(())
}

impl IdentityMode {
    /// How this mode writes a principal; rules and stored rows use the same form.
    pub fn principal_form(self) -> PrincipalForm {
        match self {
            IdentityMode::OAuth => PrincipalForm::Exact,
            IdentityMode::Local | IdentityMode::Header => PrincipalForm::Folded,
        }
    }
}

impl IdentityConfig {
    /// The claims a caller can carry in this mode, for rules to name; `None` when any may be (a
    /// token's claims, in `oauth` mode). Every mode carries `principal`.
    fn carried_claims(&self) -> Option<Vec<&'static str>> {
        match self.mode {
            IdentityMode::OAuth => None,
            IdentityMode::Local => Some(vec!["principal"]),
            IdentityMode::Header => Some(
                std::iter::once("principal")
                    .chain(self.groups_header.as_ref().map(|_| "groups"))
                    .chain(self.email_header.as_ref().map(|_| "email"))
                    .collect(),
            ),
        }
    }
}

/// Writes every `principal` a rule lists (`allow`, `approvers`, `[admin] allow`) in the identity
/// mode's normal form, as the caller's own is; two that become one are refused, never merged.
pub(super) fn normalise_rules(config: &mut super::Config) -> Result<(), ConfigError> {
    let form = config.identity.mode.principal_form();
    let tools = config.tools.iter_mut().enumerate();
    let tools = tools.filter_map(|(i, t)| t.allow.as_mut().map(|a| (format!("tools[{i}].allow"), a)));
    let upstreams = config.upstreams.iter_mut().enumerate();
    let upstreams = upstreams.filter_map(|(i, u)| u.allow.as_mut().map(|a| (format!("upstreams[{i}].allow"), a)));
    let approvals = config.approvals.iter_mut().enumerate();
    let approvals = approvals.map(|(i, a)| (format!("approvals[{i}].approvers"), &mut a.approvers));
    let admin = config.admin.allow.as_mut().map(|a| ("admin.allow".to_owned(), a));
    for (key, rule) in tools.chain(upstreams).chain(approvals).chain(admin) {
        let Some(principals) = rule.get_mut("principal") else {
            continue;
        };
        let normal: Vec<String> = principals.iter().map(|p| form.normal(p)).collect();
        for (j, principal) in normal.iter().enumerate() {
            if let Some(i) = normal[..j].iter().position(|n| n == principal)
                && principals[i] != principals[j]
            {
                return Err(ConfigError::key(
                    format!("{key}.principal"),
                    format!(
                        "`{}` and `{}` are one principal in `{}` identity mode (both `{principal}`, {form}); \
                         list it once",
                        principals[i], principals[j], config.identity.mode,
                    ),
                ));
            }
        }
        *principals = normal;
    }
    Ok(())
}
