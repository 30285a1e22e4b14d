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
    /// RFC 9207: when set, an `iss` sent to the callback must equal it.
    pub issuer: Option<String>,
    pub revocation_url: Option<Url>,
    pub client_id: String,
    pub client_secret: Secret<String>,
    /// Scopes every sign-in asks for; tools may require more.
    #[serde(default)]
    pub scopes: Vec<String>,
    pub scope_separator: Option<String>,
    pub client_auth: Option<ClientAuth>,
    /// Extra authorize parameters (e.g. `access_type = "offline"`).
    #[serde(default)]
    pub authorize_params: BTreeMap<String, String>,
    /// Microsoft Entra ID: the tenant (default "common").
    pub tenant: Option<String>,
}
