//! The OAuth 2 client side: providers from configuration (with presets for well-known ones),
//! authorize URLs with PKCE S256, the code exchange, refresh and revocation.
//!
//! Written against RFC 6749, 7636, 7009 and 9207 directly rather than through the oauth2 crate:
//! real providers answer token requests in JSON or form encoding (GitHub), join scopes with
//! commas or spaces, and put errors in 200 responses; handling those is simpler with the few
//! requests spelled out here than around a typed client.

mod presets;

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value;
use sha2::{Digest, Sha256};
use url::Url;

use crate::config::{ClientAuth, Config, ConfigError, ProviderConfig};
use crate::domain::is_identifier;
use crate::secret::Secret;

/// Time allowed for any request to a provider.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest provider answer read.
const MAX_PROVIDER_RESPONSE: usize = 256 * 1024;

/// A provider with every URL resolved.
#[derive(Debug, Clone)]
pub struct Provider {
    pub id: String,
    pub name: String,
    pub authorize_url: Url,
    pub token_url: Url,
    pub userinfo_url: Option<Url>,
    pub account_label: Option<String>,
    pub issuer: Option<String>,
    pub revocation_url: Option<Url>,
    pub client_id: String,
    client_secret: Secret<String>,
    pub scopes: Vec<String>,
    pub scope_separator: String,
    pub client_auth: ClientAuth,
    pub authorize_params: BTreeMap<String, String>,
}

/// Providers must be reached over HTTPS, except on loopback (development and tests).
fn check_url(url: &Url, key: &str) -> Result<(), ConfigError> {
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    if url.scheme() == "https" || (url.scheme() == "http" && loopback) {
        Ok(())
    } else {
        Err(ConfigError::key(key, "must be an https URL (http only on loopback)"))
    }
}

impl Provider {
    fn from_config(config: &ProviderConfig, key: &str) -> Result<Self, ConfigError> {
        if !is_identifier(&config.id) {
            return Err(ConfigError::key(
                format!("{key}.id"),
                "must be letters, digits, `-` and `_`",
            ));
        }
        let preset = match &config.preset {
            Some(name) => Some(presets::preset(name, config.tenant.as_deref()).ok_or_else(|| {
                ConfigError::key(
                    format!("{key}.preset"),
                    format!("`{name}` is not a preset ({})", presets::NAMES.join(", ")),
                )
            })?),
            None => None,
        };
        let required = |value: Option<Url>, preset_value: Option<Url>, field: &str| {
            value
                .or(preset_value)
                .ok_or_else(|| ConfigError::key(format!("{key}.{field}"), "is required without a preset"))
        };
        let authorize_url = required(
            config.authorize_url.clone(),
            preset.as_ref().map(|p| p.authorize_url.clone()),
            "authorize_url",
        )?;
        let token_url = required(
            config.token_url.clone(),
            preset.as_ref().map(|p| p.token_url.clone()),
            "token_url",
        )?;
        let userinfo_url = config
            .userinfo_url
            .clone()
            .or_else(|| preset.as_ref().and_then(|p| p.userinfo_url.clone()));
        let revocation_url = config
            .revocation_url
            .clone()
            .or_else(|| preset.as_ref().and_then(|p| p.revocation_url.clone()));
        check_url(&authorize_url, &format!("{key}.authorize_url"))?;
        check_url(&token_url, &format!("{key}.token_url"))?;
        if let Some(url) = &userinfo_url {
            check_url(url, &format!("{key}.userinfo_url"))?;
        }
        if let Some(url) = &revocation_url {
            check_url(url, &format!("{key}.revocation_url"))?;
        }
        let account_label = config
            .account_label
            .clone()
            .or_else(|| preset.as_ref().and_then(|p| p.account_label.clone()));
        if let Some(pointer) = &account_label
            && !pointer.is_empty()
            && !pointer.starts_with('/')
        {
            return Err(ConfigError::key(
                format!("{key}.account_label"),
                "must be a JSON pointer like \"/login\"",
            ));
        }
        if config.client_id.trim().is_empty() {
            return Err(ConfigError::key(format!("{key}.client_id"), "must not be empty"));
        }
        if config.client_secret.expose().is_empty() {
            return Err(ConfigError::key(format!("{key}.client_secret"), "must not be empty"));
        }
        if let Some(scope) = config
            .scopes
            .iter()
            .find(|s| s.is_empty() || s.chars().any(|c| c.is_whitespace() || c == ','))
        {
            return Err(ConfigError::key(
                format!("{key}.scopes"),
                format!("{scope:?} is not one scope"),
            ));
        }
        let mut authorize_params = preset.as_ref().map(|p| p.authorize_params.clone()).unwrap_or_default();
        authorize_params.extend(config.authorize_params.clone());
        for reserved in [
            "response_type",
            "client_id",
            "redirect_uri",
            "state",
            "code_challenge",
            "code_challenge_method",
            "scope",
        ] {
            if authorize_params.contains_key(reserved) {
                return Err(ConfigError::key(
                    format!("{key}.authorize_params.{reserved}"),
                    "is set by gatehouse itself",
                ));
            }
        }
        Ok(Self {
            id: config.id.clone(),
            name: config
                .name
                .clone()
                .or_else(|| preset.as_ref().map(|p| p.name.to_owned()))
                .unwrap_or_else(|| config.id.clone()),
            authorize_url,
            token_url,
            userinfo_url,
            account_label,
            issuer: config
                .issuer
                .clone()
                .or_else(|| preset.as_ref().and_then(|p| p.issuer.clone())),
            revocation_url,
            client_id: config.client_id.clone(),
            client_secret: config.client_secret.clone(),
            scopes: config.scopes.clone(),
            scope_separator: config
                .scope_separator
                .clone()
                .or_else(|| preset.as_ref().map(|p| p.scope_separator.to_owned()))
                .unwrap_or_else(|| " ".to_owned()),
            client_auth: config
                .client_auth
                .or_else(|| preset.as_ref().map(|p| p.client_auth))
                .unwrap_or(ClientAuth::Basic),
            authorize_params,
        })
    }

    /// The provider's scopes plus `extra`, deduplicated, in a stable order.
    pub fn scopes_with(&self, extra: &[String]) -> Vec<String> {
        let mut scopes: Vec<String> = self.scopes.iter().chain(extra).cloned().collect();
        scopes.sort();
        scopes.dedup();
        scopes
    }

    /// Splits a granted-scope string as this provider writes it.
    pub fn split_scopes(&self, text: &str) -> Vec<String> {
        let mut scopes: Vec<String> = text
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        scopes.sort();
        scopes.dedup();
        scopes
    }

    /// Where the browser goes to sign in.
    pub fn authorize_url(&self, state: &str, code_challenge: &str, scopes: &[String], redirect_uri: &str) -> Url {
        let mut url = self.authorize_url.clone();
        {
            let mut query = url.query_pairs_mut();
            query
                .append_pair("response_type", "code")
                .append_pair("client_id", &self.client_id)
                .append_pair("redirect_uri", redirect_uri)
                .append_pair("state", state)
                .append_pair("code_challenge", code_challenge)
                .append_pair("code_challenge_method", "S256");
            if !scopes.is_empty() {
                query.append_pair("scope", &scopes.join(&self.scope_separator));
            }
            for (name, value) in &self.authorize_params {
                query.append_pair(name, value);
            }
        }
        url
    }
}

/// Every configured provider.
pub struct Providers {
    providers: Vec<Provider>,
}

impl Providers {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let mut providers: Vec<Provider> = Vec::new();
        for (i, provider) in config.providers.iter().enumerate() {
            let key = format!("providers[{i}]");
            let provider = Provider::from_config(provider, &key)?;
            if providers.iter().any(|p| p.id == provider.id) {
                return Err(ConfigError::key(
                    format!("{key}.id"),
                    format!("`{}` is configured twice", provider.id),
                ));
            }
            providers.push(provider);
        }
        Ok(Self { providers })
    }

    pub fn get(&self, id: &str) -> Option<&Provider> {
        self.providers.iter().find(|p| p.id == id)
    }
}

/// PKCE S256 (RFC 7636): the challenge sent to the authorize endpoint for a verifier.
pub fn pkce_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Tokens as a provider issued them.
#[derive(Debug)]
pub struct TokenResponse {
    pub access_token: Secret<String>,
    pub refresh_token: Option<Secret<String>>,
    pub expires_in: Option<u64>,
    /// Granted scopes, when the provider says (it may grant fewer than asked).
    pub scope: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// The provider refused (`invalid_grant`, `invalid_client`...): the grant is unusable.
    #[error("the provider refused: {error}{}", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Rejected { error: String, description: Option<String> },
    /// The provider could not be reached or answered nonsense: it may work later.
    #[error("the provider could not be used: {0}")]
    Unavailable(String),
}

/// Talks to providers with gatehouse's outbound client (no redirects followed).
#[derive(Clone)]
pub struct OAuthClient {
    http: reqwest::Client,
}

impl OAuthClient {
    pub fn new(http: reqwest::Client) -> Self {
        Self { http }
    }

    fn authenticated(
        &self,
        provider: &Provider,
        url: &Url,
        mut form: Vec<(&'static str, String)>,
    ) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(url.clone())
            .timeout(PROVIDER_TIMEOUT)
            .header(ACCEPT, "application/json");
        match provider.client_auth {
            ClientAuth::Basic => {
                // RFC 6749 2.3.1: form-urlencode id and secret before joining them.
                let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
                let credentials = format!(
                    "{}:{}",
                    encode(&provider.client_id),
                    encode(provider.client_secret.expose())
                );
                request = request.header(AUTHORIZATION, format!("Basic {}", STANDARD.encode(credentials)));
            }
            ClientAuth::Post => {
                form.push(("client_id", provider.client_id.clone()));
                form.push(("client_secret", provider.client_secret.expose().clone()));
            }
        }
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        request
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
    }

    /// Exchanges an authorization code (with its PKCE verifier) for tokens.
    pub async fn exchange_code(
        &self,
        provider: &Provider,
        code: &str,
        verifier: &str,
        redirect_uri: &str,
    ) -> Result<TokenResponse, OAuthError> {
        let form = vec![
            ("grant_type", "authorization_code".to_owned()),
            ("code", code.to_owned()),
            ("redirect_uri", redirect_uri.to_owned()),
            ("code_verifier", verifier.to_owned()),
        ];
        token_response(self.authenticated(provider, &provider.token_url, form)).await
    }

    pub async fn refresh(&self, provider: &Provider, refresh_token: &str) -> Result<TokenResponse, OAuthError> {
        let form = vec![
            ("grant_type", "refresh_token".to_owned()),
            ("refresh_token", refresh_token.to_owned()),
        ];
        token_response(self.authenticated(provider, &provider.token_url, form)).await
    }

    /// RFC 7009 revocation, when the provider has an endpoint for it.
    pub async fn revoke(&self, provider: &Provider, token: &str, hint: &str) -> Result<(), OAuthError> {
        let Some(url) = &provider.revocation_url else {
            return Ok(());
        };
        let form = vec![("token", token.to_owned()), ("token_type_hint", hint.to_owned())];
        let response = self
            .authenticated(provider, url, form)
            .send()
            .await
            .map_err(|e| OAuthError::Unavailable(e.to_string()))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(OAuthError::Unavailable(format!(
                "revocation answered {}",
                response.status()
            )))
        }
    }

    /// The account label from the userinfo endpoint, when the provider has one.
    pub async fn account_label(&self, provider: &Provider, access_token: &str) -> Option<String> {
        let url = provider.userinfo_url.as_ref()?;
        let pointer = provider.account_label.as_deref().unwrap_or("");
        let response = self
            .http
            .get(url.clone())
            .timeout(PROVIDER_TIMEOUT)
            .bearer_auth(access_token)
            .header(ACCEPT, "application/json")
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            tracing::info!(provider = %provider.id, status = %response.status(), "userinfo refused; no account label");
            return None;
        }
        let body = read_limited(response).await.ok()?;
        let value: Value = serde_json::from_slice(&body).ok()?;
        let label = value.pointer(pointer)?;
        let text = match label {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => return None,
        };
        Some(text.chars().filter(|c| !c.is_control()).take(200).collect())
    }
}

async fn read_limited(response: reqwest::Response) -> Result<Vec<u8>, OAuthError> {
    use futures::StreamExt;
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| OAuthError::Unavailable(e.to_string()))?;
        if body.len() + chunk.len() > MAX_PROVIDER_RESPONSE {
            return Err(OAuthError::Unavailable("the answer is too large".into()));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads a token endpoint's answer, in JSON or form encoding, success or error.
async fn token_response(request: reqwest::RequestBuilder) -> Result<TokenResponse, OAuthError> {
    let response = request
        .send()
        .await
        .map_err(|e| OAuthError::Unavailable(e.to_string()))?;
    let status = response.status();
    let body = read_limited(response).await?;
    let fields = parse_fields(&body).ok_or_else(|| {
        OAuthError::Unavailable(format!(
            "the token endpoint answered {status} with neither JSON nor form data"
        ))
    })?;
    if let Some(error) = fields.get("error").and_then(Value::as_str) {
        return Err(OAuthError::Rejected {
            error: error.chars().take(100).collect(),
            description: fields
                .get("error_description")
                .and_then(Value::as_str)
                .map(|d| d.chars().take(300).collect()),
        });
    }
    if !status.is_success() {
        return Err(OAuthError::Unavailable(format!("the token endpoint answered {status}")));
    }
    let access_token = fields
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| OAuthError::Unavailable("the token endpoint sent no access_token".into()))?;
    let expires_in = match fields.get("expires_in") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    Ok(TokenResponse {
        access_token: Secret::new(access_token.to_owned()),
        refresh_token: fields
            .get("refresh_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(|t| Secret::new(t.to_owned())),
        expires_in,
        scope: fields.get("scope").and_then(Value::as_str).map(str::to_owned),
    })
}

/// A JSON object, or `application/x-www-form-urlencoded` pairs as a JSON object of strings.
fn parse_fields(body: &[u8]) -> Option<serde_json::Map<String, Value>> {
    if let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) {
        return Some(map);
    }
    let text = std::str::from_utf8(body).ok()?.trim();
    if text.is_empty() || text.starts_with('<') || !text.contains('=') {
        return None;
    }
    Some(
        url::form_urlencoded::parse(text.as_bytes())
            .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_matches_the_rfc_7636_example() {
        assert_eq!(
            pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn token_answers_parse_in_json_and_form_encoding() {
        let json = parse_fields(br#"{"access_token":"a","expires_in":3600,"scope":"x y"}"#).expect("json");
        assert_eq!(json["expires_in"], 3600);
        let form = parse_fields(b"access_token=a%2Fb&scope=repo%2Cuser&token_type=bearer").expect("form");
        assert_eq!(form["access_token"], "a/b");
        assert_eq!(form["scope"], "repo,user");
        assert!(parse_fields(b"<html>oops</html>").is_none());
        assert!(parse_fields(b"").is_none());
    }

    fn provider(extra: &str) -> Result<Provider, ConfigError> {
        let toml = format!("id = \"acme\"\nclient_id = \"c\"\nclient_secret = \"s\"\n{extra}");
        let config: ProviderConfig = toml::from_str(&toml).expect("provider table");
        Provider::from_config(&config, "providers[0]")
    }

    #[test]
    fn presets_fill_urls_and_settings_override_them() {
        let github = provider("preset = \"github\"\nscopes = [\"read:user\"]").expect("github");
        assert_eq!(github.token_url.as_str(), "https://github.com/login/oauth/access_token");
        assert_eq!(github.name, "GitHub");
        let url = github.authorize_url(
            "st",
            "ch",
            &github.scopes_with(&["repo".into()]),
            "https://gh.example/oauth/callback",
        );
        let query: BTreeMap<String, String> = url.query_pairs().into_owned().collect();
        assert_eq!(query["scope"], "read:user,repo");
        assert_eq!(query["code_challenge_method"], "S256");
        let entra = provider("preset = \"microsoft\"\ntenant = \"contoso.onmicrosoft.com\"").expect("entra");
        assert!(
            entra
                .authorize_url
                .as_str()
                .contains("/contoso.onmicrosoft.com/oauth2/v2.0/authorize")
        );
        let overridden = provider("preset = \"gitlab\"\nauthorize_url = \"https://gitlab.acme.test/oauth/authorize\"")
            .expect("gitlab");
        assert_eq!(overridden.authorize_url.host_str(), Some("gitlab.acme.test"));
        for preset in presets::NAMES {
            provider(&format!("preset = \"{preset}\"")).unwrap_or_else(|e| panic!("{preset}: {e}"));
        }
    }

    #[test]
    fn provider_errors_name_their_key() {
        let key_of = |extra: &str| match provider(extra) {
            Err(ConfigError::Key { key, .. }) => key,
            other => panic!("expected a key error for {extra:?}, got {other:?}"),
        };
        assert_eq!(key_of(""), "providers[0].authorize_url");
        assert_eq!(key_of("preset = \"myspace\""), "providers[0].preset");
        assert_eq!(
            key_of("authorize_url = \"http://auth.acme.test/a\"\ntoken_url = \"https://auth.acme.test/t\""),
            "providers[0].authorize_url"
        );
        assert_eq!(key_of("preset = \"github\"\nscopes = [\"a b\"]"), "providers[0].scopes");
        assert_eq!(
            key_of("preset = \"github\"\nauthorize_params = { state = \"x\" }"),
            "providers[0].authorize_params.state"
        );
        assert_eq!(
            key_of("preset = \"github\"\naccount_label = \"login\""),
            "providers[0].account_label"
        );
    }
}
