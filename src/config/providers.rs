//! `[[providers]]`: the OAuth 2 providers users connect to, as configured (presets are applied by
//! `crate::providers`).

use std::collections::BTreeMap;

use serde::Deserialize;
use url::Url;

use crate::secret::Secret;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// HTTP Basic with the client id and secret (RFC 6749 2.3.1).
    Basic,
    /// `client_id` and `client_secret` in the form body.
    Post,
}

/// An OAuth 2 provider. A `preset` fills the URLs of a known provider; every key set here wins.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub id: String,
    pub preset: Option<String>,
    /// Shown to users ("GitHub"); defaults to the preset's name or the id.
    pub name: Option<String>,
    pub authorize_url: Option<Url>,
    pub token_url: Option<Url>,
    pub userinfo_url: Option<Url>,
    /// JSON pointer into the userinfo answer for the account label (e.g. "/login").
    pub account_label: Option<String>,
    /// RFC 9207: when set, an `iss` sent to the callback must equal it, and no other provider's
    /// callback may carry it.
    pub issuer: Option<String>,
    /// Whether a callback without `iss` is refused (default: whenever `issuer` is set). False for
    /// a provider that has an issuer but sends `iss` only sometimes.
    pub require_iss: Option<bool>,
    pub revocation_url: Option<Url>,
    pub client_id: String,
    pub client_secret: Secret<String>,
    /// Scopes every sign-in asks for; tools may require more.
    #[serde(default)]
    pub scopes: Vec<String>,
    pub scope_separator: Option<String>,
    /// The authorize parameter that carries the scopes (`scope`; Slack's user tokens: `user_scope`).
    pub scope_param: Option<String>,
    /// Scopes the provider grants without listing them in its token answers (Microsoft's
    /// `offline_access`): counted as granted.
    #[serde(default)]
    pub unlisted_scopes: Vec<String>,
    /// A JSON pointer to where the token answer holds the user's tokens (Slack: `/authed_user`);
    /// an answer without it is read at its top level.
    pub tokens_at: Option<String>,
    pub client_auth: Option<ClientAuth>,
    /// Extra authorize parameters (e.g. `access_type = "offline"`).
    #[serde(default)]
    pub authorize_params: BTreeMap<String, String>,
    /// Microsoft Entra ID: the tenant (default "common").
    pub tenant: Option<String>,
}
