//! Settings of well-known providers, so a configuration needs only `preset`, the client id and
//! the secret. Any key set in the configuration wins over the preset.

use std::collections::BTreeMap;

use url::Url;

use crate::config::ClientAuth;

pub const NAMES: [&str; 6] = ["github", "google", "slack", "microsoft", "gitlab", "atlassian"];

pub struct Preset {
    pub name: &'static str,
    pub authorize_url: Url,
    pub token_url: Url,
    pub userinfo_url: Option<Url>,
    pub account_label: Option<String>,
    pub issuer: Option<String>,
    pub revocation_url: Option<Url>,
    pub scope_separator: &'static str,
    pub client_auth: ClientAuth,
    pub authorize_params: BTreeMap<String, String>,
}

fn url(text: &str) -> Url {
    Url::parse(text).expect("preset URLs are valid")
}

fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// The preset called `name`; `tenant` is Microsoft Entra ID's directory ("common" by default).
pub fn preset(name: &str, tenant: Option<&str>) -> Option<Preset> {
    Some(match name {
        // GitHub answers the token request in form encoding unless asked for JSON, joins granted
        // scopes with commas, and has no RFC 7009 revocation endpoint.
        "github" => Preset {
            name: "GitHub",
            authorize_url: url("https://github.com/login/oauth/authorize"),
            token_url: url("https://github.com/login/oauth/access_token"),
            userinfo_url: Some(url("https://api.github.com/user")),
            account_label: Some("/login".into()),
            issuer: None,
            revocation_url: None,
            scope_separator: ",",
            client_auth: ClientAuth::Post,
            authorize_params: BTreeMap::new(),
        },
        // offline_access via access_type=offline; prompt=consent so a refresh token comes back
        // on every sign-in, not only the first.
        "google" => Preset {
            name: "Google",
            authorize_url: url("https://accounts.google.com/o/oauth2/v2/auth"),
            token_url: url("https://oauth2.googleapis.com/token"),
            userinfo_url: Some(url("https://openidconnect.googleapis.com/v1/userinfo")),
            account_label: Some("/email".into()),
            issuer: Some("https://accounts.google.com".into()),
            revocation_url: Some(url("https://oauth2.googleapis.com/revoke")),
            scope_separator: " ",
            client_auth: ClientAuth::Post,
            authorize_params: params(&[("access_type", "offline"), ("prompt", "consent")]),
        },
        // Sign in with Slack (OpenID Connect): standard endpoints and answers.
        "slack" => Preset {
            name: "Slack",
            authorize_url: url("https://slack.com/openid/connect/authorize"),
            token_url: url("https://slack.com/api/openid.connect.token"),
            userinfo_url: Some(url("https://slack.com/api/openid.connect.userInfo")),
            account_label: Some("/email".into()),
            issuer: None,
            revocation_url: None,
            scope_separator: " ",
            client_auth: ClientAuth::Post,
            authorize_params: BTreeMap::new(),
        },
        "microsoft" => {
            let tenant = tenant.unwrap_or("common");
            Preset {
                name: "Microsoft",
                authorize_url: url(&format!(
                    "https://login.microsoftonline.com/{tenant}/oauth2/v2.0/authorize"
                )),
                token_url: url(&format!("https://login.microsoftonline.com/{tenant}/oauth2/v2.0/token")),
                userinfo_url: Some(url("https://graph.microsoft.com/oidc/userinfo")),
                account_label: Some("/email".into()),
                issuer: None,
                revocation_url: None,
                scope_separator: " ",
                client_auth: ClientAuth::Post,
                authorize_params: BTreeMap::new(),
            }
        }
        "gitlab" => Preset {
            name: "GitLab",
            authorize_url: url("https://gitlab.com/oauth/authorize"),
            token_url: url("https://gitlab.com/oauth/token"),
            userinfo_url: Some(url("https://gitlab.com/api/v4/user")),
            account_label: Some("/username".into()),
            issuer: None,
            revocation_url: Some(url("https://gitlab.com/oauth/revoke")),
            scope_separator: " ",
            client_auth: ClientAuth::Basic,
            authorize_params: BTreeMap::new(),
        },
        // Atlassian needs audience=api.atlassian.com, and offline_access among the scopes for a
        // refresh token.
        "atlassian" => Preset {
            name: "Atlassian",
            authorize_url: url("https://auth.atlassian.com/authorize"),
            token_url: url("https://auth.atlassian.com/oauth/token"),
            userinfo_url: Some(url("https://api.atlassian.com/me")),
            account_label: Some("/email".into()),
            issuer: None,
            revocation_url: None,
            scope_separator: " ",
            client_auth: ClientAuth::Post,
            authorize_params: params(&[("audience", "api.atlassian.com"), ("prompt", "consent")]),
        },
        _ => return None,
    })
}
