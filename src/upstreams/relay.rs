//! The client side of one upstream session (an rmcp `ClientHandler`): what the upstream sends
//! while calls run goes to the clients whose calls they are. Progress notifications carry the
//! progress token gatehouse gave the upstream request, which names the call exactly; log messages
//! and the upstream's own requests (`elicitation/create`, `sampling/createMessage`, `roots/list`)
//! name no request, so they go to the newest call still running on the session whose client
//! declared what the request needs (the usual case is one call at a time); without one, the
//! upstream gets an error saying so. At most [`MAX_ASKING`] such requests wait at once.
//!
//! rmcp handles each notification in a task of its own, so a notification could reach the client
//! after the call's answer (or, once the call is over, not at all). So progress and log messages
//! are taken off the upstream's message stream in arrival order ([`InOrder`]), before rmcp sees
//! any later answer, and only the rest goes through the handler.
//!
//! A 2026-07-28 call's stream takes notifications only: an upstream's request during such a call
//! goes to the call itself as an [`Ask`], which parks the call and answers `input_required` (see
//! `parked`); the retry's answer comes back through the `Ask`.
//!
//! Everything relayed crosses as [`Crossing`] says: redacted with the secrets of the call it goes
//! to, and elicitations marked as the upstream's.
//!
//! The session also holds the resource subscriptions made through it: which of gatehouse's
//! sessions subscribed to which of the upstream's resources. An update goes to each of them
//! through the bus, which stores it for the session's stream on whichever replica holds it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::ClientHandler;
#[allow(deprecated)]
use rmcp::model::LoggingMessageNotificationParam;
// Sampling and roots are deprecated from protocol 2026-07-28 on (SEP-2577), but upstreams of
// 2025-11-25 still ask for them, and clients of that revision still answer.
use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::model::{
    ClientCapabilities, ClientConfig, CustomNotification, ElicitRequestParams, ElicitResult, ElicitationCapability,
    ErrorData, FormElicitationCapability, Implementation, JsonObject, ProgressNotificationParam, ProgressToken,
    RootsCapabilities, SamplingCapability, UrlElicitationCapability,
};
#[allow(deprecated)]
use rmcp::model::{CreateMessageRequestParams, CreateMessageResult, ListRootsResult};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, SemaphorePermit, mpsc, oneshot};
use url::Origin;

mod in_order;

pub use in_order::InOrder;

use super::crossing::{Crossing, Refused};
use super::offers::exposed_uri;
use super::upstream::Upstream;
use crate::domain::SessionId;
use crate::events::Bus;
use crate::jsonrpc::{self, ELICITATION_COMPLETE};
use crate::rate_limit::RateLimit;
use crate::tools::{CallStream, Redactor};

/// A call running on the session: where its messages go.
struct Running {
    token: ProgressToken,
    /// The client's own progress token, if it asked for progress.
    client_token: Option<Value>,
    /// The call's own stream, when its answer is streamed: no notification reaches a call without
    /// one, nor a request unless the call takes [`Ask`]s.
    stream: Option<Arc<dyn CallStream>>,
    /// Where the upstream's requests go for a 2026-07-28 call, which parks on them.
    asks: Option<mpsc::Sender<Ask>>,
    /// The call's secrets, kept out of everything relayed to it.
    redactor: Arc<Redactor>,
    /// What the client declared it answers: `elicitation/create` modes, `sampling/createMessage`
    /// (with tools or without), `roots/list`.
    form: bool,
    url: bool,
    sampling: bool,
    sampling_tools: bool,
    roots: bool,
}

/// Where a relayed message goes: the call's stream, and the secrets it must not carry.
struct Target {
    stream: Arc<dyn CallStream>,
    redactor: Arc<Redactor>,
}

/// Where an upstream's request goes: the call's stream (2025-11-25) or the call itself, as an
/// [`Ask`] (2026-07-28).
enum Asked {
    Stream(Target),
    Call(mpsc::Sender<Ask>, Arc<Redactor>),
}

impl Asked {
    fn redactor(&self) -> &Redactor {
        match self {
            Asked::Stream(target) => &target.redactor,
            Asked::Call(_, redactor) => redactor,
        }
    }
}

/// An upstream's request to the client of a 2026-07-28 call, already crossed (redacted, marked):
/// the call parks on it and answers `input_required`; the retry's answer goes back through it.
pub struct Ask {
    pub method: &'static str,
    pub params: Value,
    reply: oneshot::Sender<Result<Value, ErrorData>>,
}

impl Ask {
    /// The input request the client is given.
    pub fn input_request(&self) -> Value {
        json!({"method": self.method, "params": self.params})
    }

    /// The client's answer (`None`: the retry brought none for it).
    pub fn answer(self, response: Option<&Value>) {
        let answer = response
            .cloned()
            .ok_or_else(|| ErrorData::invalid_request(format!("the client gave no answer to {}", self.method), None));
        // An error only says that the upstream's request is gone.
        let _ = self.reply.send(answer);
    }

    /// Answers the upstream's request with an error saying `why`.
    pub fn refuse(self, why: impl Into<String>) {
        let _ = self.reply.send(Err(ErrorData::internal_error(why.into(), None)));
    }
}

/// Shared by the session's handler and the calls on it.
pub struct Relay {
    upstream: String,
    /// The upstream's `elicitation_origins`.
    origins: Option<Vec<Origin>>,
    running: Mutex<Vec<Running>>,
    /// Told when the upstream says its tool, resource or prompt list changed.
    list_changed: mpsc::Sender<String>,
    /// The upstream's URIs subscribed to through this session, and by which of gatehouse's
    /// sessions (at most [`MAX_SUBSCRIPTIONS`] pairs).
    subscriptions: Mutex<HashMap<String, HashSet<SessionId>>>,
    /// The upstream's tag in gatehouse's URIs.
    tag: String,
    bus: Arc<Bus>,
    /// The session's own secrets, kept out of resource updates.
    redactor: Redactor,
    /// Updates passed on, by the upstream's URI: each is stored for every subscriber, so an
    /// upstream cannot make gatehouse write without bound.
    updates: RateLimit<String>,
    /// Room for the upstream's requests waiting for a client's answer ([`MAX_ASKING`]).
    asking: Semaphore,
}

/// An upstream session's requests relayed and not yet answered, at most; beyond it the upstream
/// is answered with an error at once, so it cannot make gatehouse hold requests without bound.
const MAX_ASKING: usize = 8;
/// Subscriptions held through one upstream session, at most.
pub const MAX_SUBSCRIPTIONS: usize = 1000;
/// Updates of one resource passed on per minute, at most (a burst of as many, then one a
/// second); the rest are dropped: an update only says "read it again".
pub const UPDATES_PER_MINUTE: u32 = 60;

/// While a call runs; unregisters it when dropped.
pub struct RunningCall {
    relay: Arc<Relay>,
    token: ProgressToken,
}

impl Drop for RunningCall {
    fn drop(&mut self) {
        self.relay.lock().retain(|call| call.token != self.token);
    }
}

impl Relay {
    pub fn new(
        upstream: &Upstream,
        list_changed: mpsc::Sender<String>,
        bus: Arc<Bus>,
        redactor: Redactor,
    ) -> Arc<Self> {
        Arc::new(Self {
            upstream: upstream.id.clone(),
            origins: upstream.elicitation_origins.clone(),
            running: Mutex::new(Vec::new()),
            list_changed,
            subscriptions: Mutex::new(HashMap::new()),
            tag: upstream.tag.clone(),
            bus,
            redactor,
            updates: RateLimit::per_minute(UPDATES_PER_MINUTE),
            asking: Semaphore::new(MAX_ASKING),
        })
    }

    /// Room for one more of the upstream's requests to wait for its client.
    fn asking(&self) -> Result<SemaphorePermit<'_>, ErrorData> {
        self.asking.try_acquire().map_err(|_| {
            ErrorData::invalid_request(
                format!("{MAX_ASKING} requests of this session already wait for the client's answer"),
                None,
            )
        })
    }

    fn subscriptions(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashSet<SessionId>>> {
        self.subscriptions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `session` subscribed to the upstream's `uri`; `Err` when the session holds
    /// [`MAX_SUBSCRIPTIONS`] already.
    pub fn subscribe(&self, uri: &str, session: &SessionId) -> Result<(), usize> {
        let mut subscriptions = self.subscriptions();
        let held: usize = subscriptions.values().map(HashSet::len).sum();
        if held >= MAX_SUBSCRIPTIONS && !subscriptions.get(uri).is_some_and(|s| s.contains(session)) {
            return Err(MAX_SUBSCRIPTIONS);
        }
        subscriptions.entry(uri.to_owned()).or_default().insert(session.clone());
        Ok(())
    }

    /// Forgets that `session` subscribed to `uri`; true when nobody is subscribed to it any more
    /// (the upstream may be told).
    pub fn unsubscribe(&self, uri: &str, session: &SessionId) -> bool {
        let mut subscriptions = self.subscriptions();
        let Some(sessions) = subscriptions.get_mut(uri) else {
            return true;
        };
        sessions.remove(session);
        let nobody = sessions.is_empty();
        if nobody {
            subscriptions.remove(uri);
        }
        nobody
    }

    /// Forgets every subscription of `session`, which has ended.
    pub fn forget_subscriber(&self, session: &SessionId) {
        self.subscriptions().retain(|_, sessions| {
            sessions.remove(session);
            !sessions.is_empty()
        });
    }

    /// Tells every session subscribed to `uri` that it was updated; a session that has ended is
    /// forgotten.
    pub(super) async fn updated(&self, params: &ResourceUpdatedNotificationParam) {
        let sessions: Vec<SessionId> = match self.subscriptions().get(&params.uri) {
            Some(sessions) => sessions.iter().cloned().collect(),
            None => return,
        };
        if self.updates.check(&params.uri).is_err() {
            tracing::debug!(upstream = %self.upstream, "dropped a resource update beyond {UPDATES_PER_MINUTE} a minute");
            return;
        }
        let uri = self.redactor.text(&exposed_uri(&self.tag, &params.uri));
        let message = jsonrpc::notification("notifications/resources/updated", json!({ "uri": uri }));
        for session in sessions {
            match self.bus.publish(&session, &message).await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    self.unsubscribe(&params.uri, &session);
                }
                Err(error) => {
                    tracing::warn!(upstream = %self.upstream, %error, "could not pass a resource update on");
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Running>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether any call is running on the session, or a client is subscribed through it (its
    /// updates would be lost if it closed).
    pub fn is_busy(&self) -> bool {
        !self.lock().is_empty() || !self.subscriptions().is_empty()
    }

    /// Registers a call whose upstream request carries `token`; messages for it go to `stream`,
    /// with `redactor`'s secrets taken out.
    pub fn register(
        self: &Arc<Self>,
        token: ProgressToken,
        client_token: Option<Value>,
        stream: Option<Arc<dyn CallStream>>,
        redactor: Arc<Redactor>,
        client_capabilities: &Value,
        asks: Option<mpsc::Sender<Ask>>,
    ) -> RunningCall {
        let elicitation = client_capabilities.get("elicitation");
        // A client that declares `elicitation: {}` supports form mode (2025-06-18 and later).
        let form = elicitation.is_some_and(|e| {
            e.get("form").is_some_and(Value::is_object) || e.as_object().is_some_and(|o| o.is_empty())
        });
        let url = elicitation.and_then(|e| e.get("url")).is_some_and(Value::is_object);
        let declared = |pointer: &str| client_capabilities.pointer(pointer).is_some_and(Value::is_object);
        self.lock().push(Running {
            token: token.clone(),
            client_token,
            stream,
            asks,
            redactor,
            form,
            url,
            sampling: declared("/sampling"),
            sampling_tools: declared("/sampling/tools"),
            roots: declared("/roots"),
        });
        RunningCall {
            relay: self.clone(),
            token,
        }
    }

    /// Where progress of the call with `token` goes, when its client asked for progress.
    fn stream_for_progress(&self, token: &ProgressToken) -> Option<(Target, Value)> {
        let running = self.lock();
        let call = running.iter().find(|call| &call.token == token)?;
        let target = Target {
            stream: call.stream.clone()?,
            redactor: call.redactor.clone(),
        };
        Some((target, call.client_token.clone()?))
    }

    /// The newest call that has a stream and is `wanted`.
    fn newest(&self, wanted: impl Fn(&Running) -> bool) -> Option<Target> {
        self.lock().iter().rev().filter(|call| wanted(call)).find_map(|call| {
            Some(Target {
                stream: call.stream.clone()?,
                redactor: call.redactor.clone(),
            })
        })
    }

    /// The upstream said one of its lists changed: it is listed again (coalesced).
    pub(super) fn list_again(&self) {
        // A full queue already holds a refresh to do; one more adds nothing.
        let _ = self.list_changed.try_send(self.upstream.clone());
    }

    /// Where a request goes: the newest call that is `wanted` and takes [`Ask`]s or has a stream.
    fn newest_asked(&self, wanted: impl Fn(&Running) -> bool) -> Option<Asked> {
        self.lock().iter().rev().filter(|call| wanted(call)).find_map(|call| {
            if let Some(asks) = &call.asks {
                return Some(Asked::Call(asks.clone(), call.redactor.clone()));
            }
            Some(Asked::Stream(Target {
                stream: call.stream.clone()?,
                redactor: call.redactor.clone(),
            }))
        })
    }

    fn crossing<'a>(&'a self, redactor: &'a Redactor) -> Crossing<'a> {
        Crossing {
            upstream: &self.upstream,
            origins: self.origins.as_deref(),
            redactor,
        }
    }
}

impl Relay {
    pub(super) async fn progress(&self, params: &ProgressNotificationParam) {
        let Some((target, client_token)) = self.stream_for_progress(&params.progress_token) else {
            return;
        };
        let mut progress = json!({"progressToken": client_token, "progress": params.progress});
        if let Some(total) = params.total {
            progress["total"] = json!(total);
        }
        if let Some(message) = &params.message {
            progress["message"] = json!(self.crossing(&target.redactor).text(message));
        }
        target.stream.notify("notifications/progress", progress).await;
    }

    // Logging is deprecated from protocol 2026-07-28 on (SEP-2577), but the upstreams of
    // 2025-11-25 still send it, and gatehouse's clients of that revision still read it.
    #[allow(deprecated)]
    pub(super) async fn log(&self, params: &LoggingMessageNotificationParam) {
        let Some(target) = self.newest(|_| true) else { return };
        let logger = params.logger.clone().unwrap_or_else(|| self.upstream.clone());
        let message = json!({"level": params.level, "logger": logger, "data": params.data});
        let message = self.crossing(&target.redactor).value(message);
        target.stream.notify("notifications/message", message).await;
    }

    /// A notification of the upstream's own: one that says it finished one of its URL
    /// elicitations goes to the client, which retries on it.
    pub(super) async fn custom(&self, notification: CustomNotification) {
        if notification.method == ELICITATION_COMPLETE
            && let Some(target) = self.newest(|call| call.url)
        {
            let params = notification.params.unwrap_or_else(|| json!({}));
            let params = self.crossing(&target.redactor).value(params);
            target.stream.notify(&notification.method, params).await;
        }
    }
}

/// The handler rmcp runs for the session.
#[derive(Clone)]
pub struct Handler(pub Arc<Relay>);

impl ClientHandler for Handler {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let _asking = self.0.asking()?;
        let url_mode = matches!(request, ElicitRequestParams::UrlElicitationParams { .. });
        let Some(target) = self.0.newest_asked(|call| if url_mode { call.url } else { call.form }) else {
            let mode = if url_mode { "url" } else { "form" };
            return Err(ErrorData::invalid_request(
                format!("the client of this call cannot answer {mode}-mode elicitations"),
                None,
            ));
        };
        let params = serde_json::to_value(&request)
            .map_err(|e| ErrorData::internal_error(format!("cannot relay the elicitation: {e}"), None))?;
        let params = self
            .0
            .crossing(target.redactor())
            .elicitation(params)
            .map_err(|Refused(why)| ErrorData::invalid_params(why, None))?;
        ask(target, "elicitation/create", params).await
    }

    #[allow(deprecated)]
    async fn create_message(
        &self,
        request: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let _asking = self.0.asking()?;
        let with_tools = request.tools.as_ref().is_some_and(|tools| !tools.is_empty());
        let Some(target) = self
            .0
            .newest_asked(|call| call.sampling && (call.sampling_tools || !with_tools))
        else {
            let what = if with_tools {
                "sampling requests with tools"
            } else {
                "sampling requests"
            };
            return Err(ErrorData::invalid_request(
                format!("the client of this call cannot answer {what}"),
                None,
            ));
        };
        let params = serde_json::to_value(&request)
            .map_err(|e| ErrorData::internal_error(format!("cannot relay the sampling request: {e}"), None))?;
        let params = self.0.crossing(target.redactor()).value(params);
        ask(target, "sampling/createMessage", params).await
    }

    #[allow(deprecated)]
    async fn list_roots(&self, _context: RequestContext<RoleClient>) -> Result<ListRootsResult, ErrorData> {
        let _asking = self.0.asking()?;
        let Some(target) = self.0.newest_asked(|call| call.roots) else {
            // Many servers ask as soon as they start, outside any call; being told no is the
            // ordinary answer, not a fault.
            tracing::debug!(upstream = %self.0.upstream, "roots/list asked with no client of a running call to answer it; answered with an error");
            return Err(ErrorData::invalid_request(
                "no client of a running call answers roots/list",
                None,
            ));
        };
        ask(target, "roots/list", json!({})).await
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.list_again();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.list_again();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.list_again();
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.0.updated(&params).await;
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _context: NotificationContext<RoleClient>,
    ) {
        self.0.custom(notification).await;
    }

    /// gatehouse relays each of these to the client of the call that asks, when that client
    /// declared it, and answers the upstream with an error otherwise.
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(
            ElicitationCapability::new()
                .with_form(FormElicitationCapability::default())
                .with_url(UrlElicitationCapability::default()),
        );
        let mut sampling = SamplingCapability::default();
        sampling.tools = Some(JsonObject::new());
        capabilities.sampling = Some(sampling);
        capabilities.roots = Some(RootsCapabilities::default());
        ClientConfig::new(
            capabilities,
            Implementation::new("gatehouse", env!("CARGO_PKG_VERSION")).with_title("gatehouse"),
        )
    }
}

/// Asks the client of `target` (on its call's stream, or through its call) and reads its answer
/// as a `T`.
async fn ask<T: DeserializeOwned>(target: Asked, method: &'static str, params: Value) -> Result<T, ErrorData> {
    let target = match target {
        Asked::Stream(target) => target,
        Asked::Call(asks, _) => {
            // 2026-07-28 has no `elicitationId`: the retry names the request by its key.
            let mut params = params;
            if let Some(fields) = params.as_object_mut() {
                fields.remove("elicitationId");
            }
            let (reply, answer) = oneshot::channel();
            let gone =
                || ErrorData::internal_error(format!("the call ended before its client answered {method}"), None);
            asks.send(Ask { method, params, reply }).await.map_err(|_| gone())?;
            let result = answer.await.map_err(|_| gone())??;
            return serde_json::from_value(result).map_err(|_| {
                ErrorData::invalid_params(format!("the client's answer to {method} could not be read"), None)
            });
        }
    };
    match target.stream.request(method, params).await {
        Some(Ok(result)) => serde_json::from_value(result)
            .map_err(|_| ErrorData::internal_error(format!("the client's answer to {method} could not be read"), None)),
        Some(Err(error)) => {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the client refused");
            Err(ErrorData::internal_error(
                format!("the client could not answer {method}: {message}"),
                None,
            ))
        }
        None => Err(ErrorData::internal_error("the client went away", None)),
    }
}
