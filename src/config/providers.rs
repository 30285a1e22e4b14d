//! `[[providers]]`: the OAuth 2 providers users connect to, as configured (presets are applied by
//! `crate::providers`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use url::Url;

use crate::secret::Secret;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// HTTP Basic with the client id and secret (RFC 6749 2.3.1).
    Basic,
    /// `client_id` and `client_secret` in the form body.
    Post,
}

/// A 2xx API answer that refuses the token: a JSON body whose value at `pointer` is one of
/// `values` (a string, or a number or boolean written as text).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRefusedWhen {
    /// A JSON pointer into the answer (Slack: `/error`).
    #[schemars(example = &"/error")]
    pub pointer: String,
    /// The values there that mean the token was refused (Slack: `invalid_auth`, `token_revoked`, ...).
    #[schemars(example = ["invalid_auth", "token_revoked"])]
    pub values: Vec<String>,
}

/// An OAuth 2 provider. A `preset` fills the URLs of a known provider; every key set here wins.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// Named by `requires = ["ID"]` or `["ID:scope1 scope2"]`; letters, digits, `-` and `_`.
    #[schemars(example = &"github")]
    pub id: String,
    /// A known provider whose URLs and quirks are filled in: `github`, `google`, `slack`,
    /// `microsoft`, `gitlab` or `atlassian`. Without one, `authorize_url` and `token_url` are required.
    #[schemars(example = &"github")]
    pub preset: Option<String>,
    /// Shown to users ("GitHub"); defaults to the preset's name or the id.
    #[schemars(example = &"GitHub")]
    pub name: Option<String>,
    /// The authorization endpoint the browser is sent to.
    #[schemars(example = &"https://github.com/login/oauth/authorize")]
    pub authorize_url: Option<Url>,
    /// The token endpoint (code exchange and refresh).
    #[schemars(example = &"https://github.com/login/oauth/access_token")]
    pub token_url: Option<Url>,
    /// An endpoint answering with the signed-in account (its label is shown on the pages).
    #[schemars(example = &"https://api.github.com/user")]
    pub userinfo_url: Option<Url>,
    /// JSON pointer into the userinfo answer for the account label (e.g. "/login").
    #[schemars(example = &"/login")]
    pub account_label: Option<String>,
    /// RFC 9207: when set, an `iss` sent to the callback must equal it, and no other provider's
    /// callback may carry it.
    #[schemars(example = &"https://accounts.google.com")]
    pub issuer: Option<String>,
    /// Whether a callback without `iss` is refused (default: whenever `issuer` is set). False for
    /// a provider that has an issuer but sends `iss` only sometimes.
    #[schemars(example = false)]
    pub require_iss: Option<bool>,
    /// RFC 7009 revocation endpoint: `disconnect` revokes the tokens there.
    #[schemars(example = &"https://oauth2.googleapis.com/revoke")]
    pub revocation_url: Option<Url>,
    /// The OAuth app's client id (`env:NAME` reads it from the environment).
    #[schemars(example = &"env:GITHUB_CLIENT_ID")]
    pub client_id: String,
    /// The OAuth app's client secret; write `env:NAME` to keep it out of the file.
    #[schemars(example = &"env:GITHUB_CLIENT_SECRET")]
    pub client_secret: Secret<String>,
    /// Scopes every sign-in asks for; tools may require more.
    #[serde(default)]
    #[schemars(example = ["read:user"])]
    pub scopes: Vec<String>,
    /// What joins scopes in the authorize request (default a space; Slack: `,`).
    #[schemars(example = &",")]
    pub scope_separator: Option<String>,
    /// The authorize parameter that carries the scopes (`scope`; Slack's user tokens: `user_scope`).
    #[schemars(example = &"user_scope")]
    pub scope_param: Option<String>,
    /// Scopes the provider grants without listing them in its token answers (Microsoft's
    /// `offline_access`): counted as granted.
    #[serde(default)]
    #[schemars(example = ["offline_access"])]
    pub unlisted_scopes: Vec<String>,
    /// A JSON pointer to where the token answer holds the user's tokens (Slack: `/authed_user`);
    /// an answer without it is read at its top level.
    #[schemars(example = &"/authed_user")]
    pub tokens_at: Option<String>,
    /// How the provider's API refuses a token in a 2xx answer (Slack: HTTP 200 with
    /// `"error": "invalid_auth"`); such an answer counts as a 401.
    #[schemars(example = serde_json::json!({"pointer": "/error", "values": ["invalid_auth"]}))]
    pub token_refused_when: Option<TokenRefusedWhen>,
    /// How the client authenticates at the token endpoint (default `basic`, unless the preset says).
    #[schemars(example = &"post")]
    pub client_auth: Option<ClientAuth>,
    /// Extra authorize parameters (e.g. `access_type = "offline"`).
    #[serde(default)]
    #[schemars(example = serde_json::json!({"access_type": "offline"}))]
    pub authorize_params: BTreeMap<String, String>,
    /// Microsoft Entra ID: the tenant (default "common").
    #[schemars(example = &"contoso.onmicrosoft.com")]
    pub tenant: Option<String>,
}
