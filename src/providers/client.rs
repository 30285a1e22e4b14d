//! The OAuth 2 client side, through the `oauth2` crate: the authorize URL with PKCE S256 (RFC
//! 7636), the code exchange and refresh (RFC 6749) and revocation (RFC 7009), plus the userinfo
//! request that names the account.
//!
//! oauth2 builds every request and reads every answer; it sends them through [`OAuthClient`]'s
//! hook, which uses gatehouse's outbound client (no redirects followed), bounds time and size,
//! and rewrites what real providers answer into the RFC 6749 shape oauth2 reads: form-encoded
//! token answers (GitHub), errors inside 200 answers, `expires_in` as a string, no `token_type`.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use oauth2::basic::{
    BasicErrorResponse, BasicRevocationErrorResponse, BasicTokenIntrospectionResponse, BasicTokenResponse,
};
use oauth2::{
    AsyncHttpClient, AuthType, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointNotSet,
    EndpointSet, HttpRequest, HttpResponse, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RefreshToken,
    RevocableToken, RevocationUrl, Scope, TokenUrl,
};
use reqwest::header::ACCEPT;
use serde_json::Value;
use url::Url;

use super::Provider;
use super::answers::{
    OAuthError, TokenResponse, TokensAt, Unusable, read_limited, reason, revocation_answer, token_answer,
};
use crate::config::ClientAuth;
use crate::outbound::Guarded;
use crate::outbound::reach::Reach;
use crate::secret::Secret;
use crate::telemetry;

/// Time allowed for any request to a provider.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);
/// Random bytes in a flow's `state`: 256 bits.
const STATE_BYTES: u32 = 32;

/// oauth2's client for one provider: its token endpoint set, and the authorize or revocation
/// endpoint when a request needs it.
pub(super) type ProviderClient<HasAuthUrl = EndpointNotSet, HasRevocationUrl = EndpointNotSet> = oauth2::Client<
    BasicErrorResponse,
    BasicTokenResponse,
    BasicTokenIntrospectionResponse,
    HintedToken,
    BasicRevocationErrorResponse,
    HasAuthUrl,
    EndpointNotSet,
    EndpointNotSet,
    HasRevocationUrl,
    EndpointSet,
>;

/// A token to revoke with the `token_type_hint` the caller gives (oauth2's own revocable token
/// derives the hint from its variant).
pub(super) struct HintedToken {
    token: String,
    hint: String,
}

impl RevocableToken for HintedToken {
    fn secret(&self) -> &str {
        &self.token
    }

    fn type_hint(&self) -> Option<&str> {
        Some(&self.hint)
    }
}

impl Provider {
    pub(super) fn oauth2(&self) -> ProviderClient {
        let client = oauth2::Client::new(ClientId::new(self.client_id.clone()))
            .set_auth_type(match (self.client_auth, &self.client_secret) {
                // RFC 6749 2.3.1: oauth2 form-encodes id and secret before joining them.
                (ClientAuth::Basic, Some(_)) => AuthType::BasicAuth,
                // A public client sends its `client_id` in the body (RFC 6749 3.2.1).
                (ClientAuth::Post, _) | (_, None) => AuthType::RequestBody,
            })
            .set_token_uri(TokenUrl::from_url(self.token_url.clone()));
        match &self.client_secret {
            Some(secret) => client.set_client_secret(ClientSecret::new(secret.expose().clone())),
            None => client,
        }
    }

    /// Where this provider's answer to a code exchange (`exchange`) or a refresh holds the user's
    /// tokens: Slack nests them in the exchange's answer only.
    pub(super) fn tokens_at(&self, exchange: bool) -> TokensAt<'_> {
        match (&self.tokens_at, exchange) {
            (None, _) => TokensAt::Top,
            (Some(pointer), true) => TokensAt::Nested(pointer),
            (Some(pointer), false) => TokensAt::NestedOrTop(pointer),
        }
    }

    /// Starts a sign-in: a fresh 256-bit `state` and PKCE S256 pair (RFC 7636), and the URL the
    /// browser goes to.
    pub fn authorize(&self, scopes: &[String], redirect_uri: &str) -> Authorization {
        let client = self
            .oauth2()
            .set_auth_uri(AuthUrl::from_url(self.authorize_url.clone()));
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client
            .authorize_url(|| CsrfToken::new_random_len(STATE_BYTES))
            .set_pkce_challenge(challenge);
        match RedirectUrl::new(redirect_uri.to_owned()) {
            Ok(redirect) => request = request.set_redirect_uri(Cow::Owned(redirect)),
            // The provider then uses the registered one, or refuses the sign-in.
            Err(error) => {
                tracing::error!(provider = %self.id, redirect_uri, %error, "the redirect URI is not a URL; left out")
            }
        }
        // oauth2 joins scopes with spaces; one scope of them joined keeps this provider's separator.
        if !scopes.is_empty() {
            let joined = scopes.join(&self.scope_separator);
            request = if self.scope_param == "scope" {
                request.add_scope(Scope::new(joined))
            } else {
                request.add_extra_param(self.scope_param.as_str(), joined)
            };
        }
        for (name, value) in &self.authorize_params {
            request = request.add_extra_param(name.as_str(), value.as_str());
        }
        if let Some(resource) = &self.resource {
            request = request.add_extra_param("resource", resource.as_str());
        }
        let (url, state) = request.url();
        Authorization {
            url,
            state: Secret::new(state.secret().clone()),
            pkce_verifier: Secret::new(verifier.secret().clone()),
        }
    }
}

/// A sign-in to start: where the browser goes, and what the flow keeps to check the callback.
pub struct Authorization {
    pub url: Url,
    pub state: Secret<String>,
    pub pkce_verifier: Secret<String>,
}

/// Which endpoint answers, and so how its answer is read.
#[derive(Clone, Copy)]
enum Endpoint<'a> {
    /// Read where the provider puts the user's tokens.
    Token(TokensAt<'a>),
    /// Sent to this URL, whatever the scheme oauth2 was handed (see [`OAuthClient::revoke`]).
    Revocation(&'a Url),
}

/// oauth2's HTTP client: [`OAuthClient::send`] for one endpoint. (A closure would do, but its
/// future's `Send` is lost to lifetime inference; a boxed future keeps it.)
struct Hook<'a> {
    client: &'a OAuthClient,
    /// What the request is (its span's `gatehouse.call`) and to which provider.
    call: &'static str,
    provider: &'a str,
    /// How internal the remote server that named the provider is (see [`Provider::reach`]).
    reach: Option<Reach>,
    endpoint: Endpoint<'a>,
}

impl<'c> AsyncHttpClient<'c> for Hook<'_> {
    type Error = Unusable;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, Unusable>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(self.client.send(request, self))
    }
}

/// Talks to providers with gatehouse's outbound client (no redirects followed), or, for those a
/// remote server named, with the guarded one held to that server's reach.
#[derive(Clone)]
pub struct OAuthClient {
    http: reqwest::Client,
    guarded: Arc<Guarded>,
}

impl OAuthClient {
    pub fn new(http: reqwest::Client, guarded: Arc<Guarded>) -> Self {
        Self { http, guarded }
    }

    /// The client for URLs remote servers name.
    pub fn guarded(&self) -> &Arc<Guarded> {
        &self.guarded
    }

    /// oauth2's HTTP client for `call`s to `provider`'s `endpoint`.
    fn hook<'a>(&'a self, call: &'static str, provider: &'a Provider, endpoint: Endpoint<'a>) -> Hook<'a> {
        Hook {
            client: self,
            call,
            provider: &provider.id,
            reach: provider.reach,
            endpoint,
        }
    }

    /// Sends a request oauth2 built within [`PROVIDER_TIMEOUT`], reads the answer within a size
    /// bound ([`read_limited`]) and rewrites it for oauth2 to read.
    async fn send(&self, request: HttpRequest, hook: &Hook<'_>) -> Result<HttpResponse, Unusable> {
        let mut request = reqwest::Request::try_from(request).map_err(|e| Unusable(e.to_string()))?;
        *request.timeout_mut() = Some(PROVIDER_TIMEOUT);
        if let Endpoint::Revocation(url) = hook.endpoint {
            *request.url_mut() = url.clone();
        }
        let http = match hook.reach {
            Some(reach) => {
                self.guarded.within(request.url(), reach).await.map_err(Unusable)?;
                self.guarded.client(reach)
            }
            None => &self.http,
        };
        match hook.endpoint {
            Endpoint::Token(tokens_at) => {
                let response = telemetry::execute(http, request, hook.call, hook.provider)
                    .await
                    .map_err(|e| Unusable(e.to_string()))?;
                let status = response.status();
                token_answer(status, &read_limited(response).await.map_err(Unusable)?, tokens_at)
            }
            Endpoint::Revocation(_) => {
                let response = telemetry::execute(http, request, hook.call, hook.provider)
                    .await
                    .map_err(|e| Unusable(e.to_string()))?;
                revocation_answer(response.status())
            }
        }
    }

    /// Exchanges an authorization code (with its PKCE verifier) for tokens.
    pub async fn exchange_code(
        &self,
        provider: &Provider,
        code: &str,
        verifier: &str,
        redirect_uri: &str,
    ) -> Result<TokenResponse, OAuthError> {
        let redirect = RedirectUrl::new(redirect_uri.to_owned())
            .map_err(|e| OAuthError::Unavailable(format!("the redirect URI is not a URL: {e}")))?;
        let client = provider.oauth2();
        let mut request = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .set_pkce_verifier(PkceCodeVerifier::new(verifier.to_owned()))
            .set_redirect_uri(Cow::Owned(redirect));
        if let Some(resource) = &provider.resource {
            request = request.add_extra_param("resource", resource.as_str());
        }
        let tokens = request
            .request_async(&self.hook("oauth.exchange", provider, Endpoint::Token(provider.tokens_at(true))))
            .await?;
        Ok(tokens.into())
    }

    pub async fn refresh(&self, provider: &Provider, refresh_token: &str) -> Result<TokenResponse, OAuthError> {
        let client = provider.oauth2();
        let refresh_token = RefreshToken::new(refresh_token.to_owned());
        let mut request = client.exchange_refresh_token(&refresh_token);
        if let Some(resource) = &provider.resource {
            request = request.add_extra_param("resource", resource.as_str());
        }
        let tokens = request
            .request_async(&self.hook("oauth.refresh", provider, Endpoint::Token(provider.tokens_at(false))))
            .await?;
        Ok(tokens.into())
    }

    /// RFC 7009 revocation, when the provider has an endpoint for it. Any failure, a refusal
    /// included, is [`OAuthError::Unavailable`] ([`revocation_answer`] reads the status alone).
    pub async fn revoke(&self, provider: &Provider, token: &str, hint: &str) -> Result<(), OAuthError> {
        let Some(url) = &provider.revocation_url else {
            return Ok(());
        };
        // oauth2 revokes only at https URLs (RFC 7009 2), but providers on loopback may use http
        // (see `check_url`): oauth2 is handed the https spelling and the hook sends the request
        // to the configured URL.
        let mut https = url.clone();
        https
            .set_scheme("https")
            .map_err(|()| OAuthError::Unavailable(format!("{url} cannot be spelled with https")))?;
        let client = provider.oauth2().set_revocation_url(RevocationUrl::from_url(https));
        let token = HintedToken {
            token: token.to_owned(),
            hint: hint.to_owned(),
        };
        client
            .revoke_token(token)
            .map_err(|e| OAuthError::Unavailable(e.to_string()))?
            .request_async(&self.hook("oauth.revoke", provider, Endpoint::Revocation(url)))
            .await
            .map_err(|e| OAuthError::Unavailable(reason(e)))?;
        Ok(())
    }

    /// The account label from the userinfo endpoint, when the provider has one. Not OAuth: a
    /// plain GET with the bearer token.
    pub async fn account_label(&self, provider: &Provider, access_token: &str) -> Option<String> {
        let url = provider.userinfo_url.as_ref()?;
        let pointer = provider.account_label.as_deref().unwrap_or("");
        let request = self
            .http
            .get(url.clone())
            .timeout(PROVIDER_TIMEOUT)
            .bearer_auth(access_token)
            .header(ACCEPT, "application/json")
            .build()
            .ok()?;
        let response = telemetry::execute(&self.http, request, "oauth.userinfo", &provider.id)
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::providers::answers::tests::refresh_answered;
    use crate::providers::tests::provider;
    use crate::secret::Secret;

    #[tokio::test]
    async fn clients_authenticate_with_basic_or_in_the_body() {
        let basic = provider(
            "token_url = \"https://auth.acme.test/t\"\nauthorize_url = \"https://auth.acme.test/a\"\n\
             client_auth = \"basic\"",
        )
        .expect("provider");
        let basic = Provider {
            client_id: "c d".into(),
            client_secret: Some(Secret::new("s:é".into())),
            ..basic
        };
        let (request, _) = refresh_answered(&basic, 200, r#"{"access_token":"a"}"#).await;
        let credentials = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "c+d:s%3A%C3%A9");
        assert_eq!(
            request.headers()["authorization"],
            format!("Basic {credentials}").as_str()
        );
        let body = String::from_utf8(request.body().clone()).expect("utf-8");
        assert_eq!(body, "grant_type=refresh_token&refresh_token=rt");

        let post = Provider {
            client_auth: ClientAuth::Post,
            ..basic
        };
        let (request, _) = refresh_answered(&post, 200, r#"{"access_token":"a"}"#).await;
        assert!(request.headers().get("authorization").is_none());
        let body: BTreeMap<String, String> = url::form_urlencoded::parse(request.body()).into_owned().collect();
        assert_eq!(body["client_id"], "c d");
        assert_eq!(body["client_secret"], "s:é");
        assert_eq!(request.headers()["accept"], "application/json");
    }

    /// RFC 7636 S256, computed here without oauth2.
    fn s256(verifier: &str) -> String {
        use base64::Engine;
        use sha2::Digest;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()))
    }

    #[test]
    fn authorize_urls_keep_the_separator_and_the_parameters() {
        let acme = provider(
            "authorize_url = \"https://auth.acme.test/a?tenant=x\"\ntoken_url = \"https://auth.acme.test/t\"\n\
             authorize_params = { audience = \"api\" }",
        )
        .expect("provider");
        let sign_in = acme.authorize(&["b".into(), "a".into()], "https://gh.example/cb");
        let query: BTreeMap<String, String> = sign_in.url.query_pairs().into_owned().collect();
        let challenge = s256(sign_in.pkce_verifier.expose());
        let expected = [
            ("audience", "api"),
            ("client_id", "c"),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("redirect_uri", "https://gh.example/cb"),
            ("response_type", "code"),
            ("scope", "b a"),
            ("state", sign_in.state.expose().as_str()),
            ("tenant", "x"),
        ];
        let expected: BTreeMap<String, String> = expected.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(query, expected);
        let slack = provider("preset = \"slack\"").expect("slack");
        let url = slack.authorize(&["b".into(), "a".into()], "https://gh.example/cb").url;
        assert!(url.query().is_some_and(|q| q.contains("user_scope=b%2Ca")), "{url}");
        let bare = slack.authorize(&[], "https://gh.example/cb").url;
        assert!(!bare.query_pairs().any(|(k, _)| k == "scope" || k == "user_scope"));
    }

    #[test]
    fn every_sign_in_gets_a_fresh_256_bit_state_and_verifier() {
        let acme =
            provider("authorize_url = \"https://a.test/a\"\ntoken_url = \"https://a.test/t\"").expect("provider");
        let (one, two) = (
            acme.authorize(&[], "https://gh.example/cb"),
            acme.authorize(&[], "https://gh.example/cb"),
        );
        assert_eq!(one.state.expose().len(), 43, "32 random bytes, base64url");
        assert_eq!(one.pkce_verifier.expose().len(), 43);
        assert_ne!(one.state.expose(), two.state.expose());
        assert_ne!(one.pkce_verifier.expose(), two.pkce_verifier.expose());
    }
}
