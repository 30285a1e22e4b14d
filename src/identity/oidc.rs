//! The pages' sign-in, OpenID Connect relying-party side: the authorization request (code, PKCE
//! S256, nonce, state) and, at the callback, the code exchange and the id_token's verification,
//! which name the browser's user with the same principal a bearer token of theirs names on `/mcp`.
//! oauth2 builds the requests and reads the token answer; the provider's metadata and keys are the
//! resource server's (discovered when first needed and kept, the keys fetched again for a key id
//! they lack at most once per `identity.jwks_refresh_interval`), and the id_token is checked there
//! with the access tokens' JOSE code. (The `openidconnect` crate did this with a second set of
//! RustCrypto curves and its own generations of their traits, about forty packages to build.)

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use oauth2::basic::{
    BasicErrorResponse, BasicRevocationErrorResponse, BasicTokenIntrospectionResponse, BasicTokenType,
};
use oauth2::{
    AsyncHttpClient, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointNotSet, EndpointSet,
    ExtraTokenFields, HttpRequest, HttpResponse, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RequestTokenError,
    Scope, StandardRevocableToken, StandardTokenResponse, TokenUrl,
};
use serde::{Deserialize, Serialize};
use url::Url;

use super::oauth::{BearerError, principal_from_claims};
use super::{Claims, Identity};
use crate::config::{Config, ConfigError, IdentityMode};
use crate::domain::Principal;
use crate::outbound::read_bounded;
use crate::public_url::PublicUrl;
use crate::routes;
use crate::secret::Secret;

/// What the pages ask the provider for: an id_token naming the user, with a name and an email.
const SCOPES: [&str; 3] = ["openid", "profile", "email"];
/// Time allowed for one request to the provider, and the largest answer read.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_ANSWER: usize = 512 * 1024;
/// Random bytes in `state` and `nonce`: 256 bits each.
const RANDOM_BYTES: u32 = 32;

/// The token answer's `id_token` (OpenID Connect Core 3.1.3.3).
#[derive(Debug, Deserialize, Serialize)]
struct IdToken {
    id_token: Option<String>,
}
impl ExtraTokenFields for IdToken {}

/// oauth2's client for the provider's authorization and token endpoints.
type Client = oauth2::Client<
    BasicErrorResponse,
    StandardTokenResponse<IdToken, BasicTokenType>,
    BasicTokenIntrospectionResponse,
    StandardRevocableToken,
    BasicRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointSet,
>;

#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    /// The provider could not be reached, or answered what no provider should.
    #[error("the identity provider cannot be reached: {0}")]
    Unavailable(String),
    /// The provider refused, or what it sent does not prove who the user is.
    #[error("{0}")]
    Refused(String),
}

/// A sign-in to start: where the browser goes, and what the callback is checked against.
pub struct Started {
    pub url: Url,
    pub state: Secret<String>,
    pub nonce: Secret<String>,
    pub pkce_verifier: Secret<String>,
}

/// Who signed in.
pub struct SignedIn {
    pub principal: Principal,
    pub claims: Claims,
}

pub struct SignIn {
    identity: Arc<Identity>,
    /// The configured issuer, which principals are named with.
    issuer: Url,
    principal_claim: String,
    client_id: ClientId,
    client_secret: Option<Secret<String>>,
    redirect: RedirectUrl,
    http: reqwest::Client,
}

impl SignIn {
    /// The pages' sign-in in `oauth` mode, else none. Config validation has checked the issuer,
    /// the client id and the public URL.
    pub fn from_config(
        config: &Config,
        identity: Arc<Identity>,
        http: reqwest::Client,
    ) -> Result<Option<Self>, ConfigError> {
        let settings = &config.identity;
        if settings.mode != IdentityMode::OAuth {
            return Ok(None);
        }
        let issuer = settings
            .issuer
            .clone()
            .ok_or_else(|| ConfigError::key("identity.issuer", "is required in `oauth` mode"))?;
        let client_id = settings
            .client_id
            .clone()
            .ok_or_else(|| ConfigError::key("identity.client_id", "is required in `oauth` mode"))?;
        let redirect = RedirectUrl::new(PublicUrl::new(&config.public_url()).at(routes::LOGIN_CALLBACK))
            .map_err(|e| ConfigError::key("server.public_url", format!("no callback URL under it: {e}")))?;
        Ok(Some(Self {
            identity,
            issuer,
            principal_claim: settings.principal_claim.clone(),
            client_id: ClientId::new(client_id),
            client_secret: settings.client_secret.clone(),
            redirect,
            http,
        }))
    }

    /// The configured issuer without a trailing slash, as principals and the `iss` parameter
    /// of the callback (RFC 9207) spell it.
    pub fn issuer(&self) -> &str {
        self.issuer.as_str().trim_end_matches('/')
    }

    /// Starts a sign-in: fresh 256-bit `state` and `nonce`, a PKCE S256 pair, and the URL of the
    /// provider's authorization endpoint.
    pub async fn start(&self) -> Result<Started, SignInError> {
        let client = self.client().await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let nonce = CsrfToken::new_random_len(RANDOM_BYTES);
        let (url, state) = client
            .authorize_url(|| CsrfToken::new_random_len(RANDOM_BYTES))
            .add_scopes(SCOPES.map(|scope| Scope::new(scope.to_owned())))
            .add_extra_param("nonce", nonce.secret())
            .set_pkce_challenge(challenge)
            .url();
        Ok(Started {
            url,
            state: Secret::new(state.secret().clone()),
            nonce: Secret::new(nonce.secret().clone()),
            pkce_verifier: Secret::new(verifier.secret().clone()),
        })
    }

    /// Finishes a sign-in whose callback brought `code`: exchanges it (with the PKCE verifier),
    /// verifies the id_token (signature, issuer, audience, expiry, nonce) and names its user.
    pub async fn finish(&self, code: &str, nonce: &str, pkce_verifier: &str) -> Result<SignedIn, SignInError> {
        let client = self.client().await?;
        let tokens = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .set_pkce_verifier(PkceCodeVerifier::new(pkce_verifier.to_owned()))
            .request_async(&Hook(&self.http))
            .await
            .map_err(|error| match error {
                RequestTokenError::ServerResponse(answer) => {
                    SignInError::Refused(format!("the identity provider refused the code ({})", answer.error()))
                }
                RequestTokenError::Request(e) => SignInError::Unavailable(e.to_string()),
                RequestTokenError::Parse(e, _) => SignInError::Unavailable(format!("its token answer: {e}")),
                RequestTokenError::Other(e) => SignInError::Unavailable(e),
            })?;
        let id_token = tokens
            .extra_fields()
            .id_token
            .as_deref()
            .ok_or_else(|| SignInError::Refused("the identity provider sent no id_token".into()))?;
        let mut claims = self
            .server()?
            .verify_id_token(id_token, self.client_id.as_str(), nonce)
            .await
            .map_err(|error| match error {
                BearerError::Unavailable(reason) => SignInError::Unavailable(reason),
                refused => SignInError::Refused(format!("the id_token is not valid: {refused}")),
            })?;
        let principal =
            principal_from_claims(&self.issuer, &self.principal_claim, &claims).map_err(SignInError::Refused)?;
        // What only this sign-in needed is not kept with the session.
        for protocol in ["nonce", "at_hash", "c_hash"] {
            claims.remove(protocol);
        }
        Ok(SignedIn {
            principal,
            claims: Claims::from_token(&claims),
        })
    }

    fn server(&self) -> Result<&super::oauth::ResourceServer, SignInError> {
        self.identity
            .resource_server()
            .ok_or_else(|| SignInError::Unavailable("the identity mode is not `oauth`".into()))
    }

    /// oauth2's client for the endpoints the provider's metadata names.
    async fn client(&self) -> Result<Client, SignInError> {
        let metadata = self
            .server()?
            .authorization_server()
            .await
            .map_err(SignInError::Unavailable)?;
        let missing = |what: &str| SignInError::Unavailable(format!("the provider's metadata names no {what}"));
        let authorize = metadata
            .authorization_endpoint
            .clone()
            .ok_or_else(|| missing("authorization_endpoint"))?;
        let token = metadata
            .token_endpoint
            .clone()
            .ok_or_else(|| missing("token_endpoint"))?;
        let client = oauth2::Client::new(self.client_id.clone())
            .set_auth_uri(AuthUrl::from_url(authorize))
            .set_token_uri(TokenUrl::from_url(token))
            .set_redirect_uri(self.redirect.clone());
        Ok(match &self.client_secret {
            Some(secret) => client.set_client_secret(ClientSecret::new(secret.expose().clone())),
            None => client,
        })
    }
}

/// oauth2's HTTP client: gatehouse's outbound client (no redirects followed), each request
/// within [`REQUEST_TIMEOUT`] and each answer within [`MAX_ANSWER`]. (A boxed future keeps the
/// `Send` a closure's would lose to lifetime inference.)
struct Hook<'a>(&'a reqwest::Client);

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Unreachable(String);

impl<'c> AsyncHttpClient<'c> for Hook<'_> {
    type Error = Unreachable;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, Unreachable>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(send(self.0, request))
    }
}

async fn send(http: &reqwest::Client, request: HttpRequest) -> Result<HttpResponse, Unreachable> {
    let mut request = reqwest::Request::try_from(request).map_err(|e| Unreachable(e.to_string()))?;
    *request.timeout_mut() = Some(REQUEST_TIMEOUT);
    let url = request.url().clone();
    let response = crate::telemetry::execute(http, request, "oidc", "identity")
        .await
        .map_err(|e| Unreachable(format!("{url}: {e}")))?;
    let mut answer = oauth2::http::Response::builder().status(response.status());
    if let Some(headers) = answer.headers_mut() {
        headers.extend(response.headers().clone());
    }
    let body = read_bounded(response, MAX_ANSWER)
        .await
        .map_err(|e| Unreachable(format!("{url}: {e}")))?;
    answer.body(body).map_err(|e| Unreachable(e.to_string()))
}
