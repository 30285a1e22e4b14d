//! The pages' sign-in, OpenID Connect relying-party side (the `openidconnect` crate): the
//! authorization request (code, PKCE S256, nonce, state) and, at the callback, the code exchange
//! and the id_token's verification, which name the browser's user with the same principal a bearer
//! token of theirs names on `/mcp`. The provider's discovery document and keys are fetched when
//! first needed and kept; an id_token signed with a key they lack fetches them again, at most once
//! per `identity.jwks_refresh_interval`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreAuthenticationFlow, CoreErrorResponseType, CoreGenderClaim, CoreJsonWebKey,
    CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm, CoreProviderMetadata, CoreRevocableToken,
    CoreRevocationErrorResponse, CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AdditionalClaims, AsyncHttpClient, AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret, CsrfToken,
    EmptyExtraTokenFields, EndpointMaybeSet, EndpointNotSet, EndpointSet, HttpRequest, HttpResponse, IdTokenClaims,
    IdTokenFields, IssuerUrl, Nonce, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RequestTokenError, Scope,
    SignatureVerificationError, StandardErrorResponse, StandardTokenResponse,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use url::Url;

use super::oauth::principal_from_claims;
use super::{Claims, Identity};
use crate::config::{Config, ConfigError, IdentityMode};
use crate::domain::Principal;
use crate::outbound::read_bounded;
use crate::public_url::PublicUrl;
use crate::refreshed::Refreshed;
use crate::routes;
use crate::secret::Secret;

/// What the pages ask the provider for: an id_token naming the user, with a name and an email.
const SCOPES: [&str; 2] = ["profile", "email"];
/// How long discovered metadata and keys are used before they are fetched again.
const METADATA_TTL: Duration = Duration::from_secs(3600);
/// Time allowed for one request to the provider, and the largest answer read.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_ANSWER: usize = 512 * 1024;
/// Random bytes in `state` and `nonce`: 256 bits each.
const RANDOM_BYTES: u32 = 32;

/// The id_token's claims besides the standard ones (`groups`, a custom principal claim, ...).
#[derive(Debug, Deserialize, Serialize)]
struct OtherClaims {
    #[serde(flatten)]
    claims: Map<String, Value>,
}
impl AdditionalClaims for OtherClaims {}

type TokenFields = IdTokenFields<
    OtherClaims,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;

/// openidconnect's client for the provider, as discovery makes it.
type Client = openidconnect::Client<
    OtherClaims,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    StandardTokenResponse<TokenFields, CoreTokenType>,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
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
    /// The client made from discovery, with the keys it found.
    discovered: Refreshed<Client>,
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
            discovered: Refreshed::new(METADATA_TTL, settings.jwks_refresh_interval),
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
        let client = self.client(None).await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                || CsrfToken::new_random_len(RANDOM_BYTES),
                || Nonce::new_random_len(RANDOM_BYTES),
            )
            .set_pkce_challenge(challenge);
        for scope in SCOPES {
            request = request.add_scope(Scope::new(scope.to_owned()));
        }
        let (url, state, nonce) = request.url();
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
        let client = self.client(None).await?;
        let tokens = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| SignInError::Unavailable(format!("the provider's metadata names no token endpoint: {e}")))?
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
            .id_token()
            .ok_or_else(|| SignInError::Refused("the identity provider sent no id_token".into()))?;
        let nonce = Nonce::new(nonce.to_owned());
        let claims = match id_token.claims(&client.id_token_verifier(), &nonce) {
            Err(ClaimsVerificationError::SignatureVerification(SignatureVerificationError::NoMatchingKey)) => {
                // Signed with a key published since the keys were fetched (rotation), perhaps.
                let fresh = self.client(Some(&client)).await?;
                id_token.claims(&fresh.id_token_verifier(), &nonce)
            }
            verified => verified,
        }
        .map_err(|e| SignInError::Refused(format!("the id_token is not valid: {e}")))?;
        self.signed_in(claims)
    }

    fn signed_in(&self, claims: &IdTokenClaims<OtherClaims, CoreGenderClaim>) -> Result<SignedIn, SignInError> {
        let json = serde_json::to_value(claims)
            .map_err(|e| SignInError::Refused(format!("the id_token's claims cannot be read: {e}")))?;
        let Value::Object(mut claims) = json else {
            return Err(SignInError::Refused("the id_token's claims are not an object".into()));
        };
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

    /// The client made from the provider's discovery document and keys: the kept one while
    /// fresh; `stale`, when given, is one whose keys could not verify an id_token, and makes a
    /// new discovery unless another request made one since, or one was tried within the
    /// refresh interval.
    async fn client(&self, stale: Option<&Arc<Client>>) -> Result<Arc<Client>, SignInError> {
        self.discovered
            .get(
                stale,
                || async {
                    self.discover().await.inspect_err(|error| {
                        tracing::warn!(issuer = %self.issuer, %error, "cannot discover the identity provider for the pages' sign-in");
                    })
                },
                || SignInError::Unavailable("the identity provider's metadata could not be fetched recently".into()),
            )
            .await
    }

    /// OpenID Connect discovery at the issuer, spelled exactly as the provider's metadata spells
    /// it (what the document and every id_token must name), and the keys it points at.
    async fn discover(&self) -> Result<Client, SignInError> {
        let server = self
            .identity
            .resource_server()
            .ok_or_else(|| SignInError::Unavailable("the identity mode is not `oauth`".into()))?;
        let metadata = server.authorization_server().await.map_err(SignInError::Unavailable)?;
        let issuer = IssuerUrl::new(metadata.issuer.clone())
            .map_err(|e| SignInError::Unavailable(format!("the issuer {} is not a URL: {e}", metadata.issuer)))?;
        let provider = CoreProviderMetadata::discover_async(issuer, &Hook(&self.http))
            .await
            .map_err(|e| SignInError::Unavailable(format!("OpenID Connect discovery: {e}")))?;
        let secret = self
            .client_secret
            .as_ref()
            .map(|secret| ClientSecret::new(secret.expose().clone()));
        Ok(Client::from_provider_metadata(provider, self.client_id.clone(), secret)
            .set_redirect_uri(self.redirect.clone()))
    }
}

/// openidconnect's HTTP client: gatehouse's outbound client (no redirects followed), each request
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
    let mut answer = openidconnect::http::Response::builder().status(response.status());
    if let Some(headers) = answer.headers_mut() {
        headers.extend(response.headers().clone());
    }
    let body = read_bounded(response, MAX_ANSWER)
        .await
        .map_err(|e| Unreachable(format!("{url}: {e}")))?;
    answer.body(body).map_err(|e| Unreachable(e.to_string()))
}
