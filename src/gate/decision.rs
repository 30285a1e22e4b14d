//! The decision for one tool call: run it with these credentials, or which elicitations the user
//! must finish first, or report the user's decline once.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::binding::{CallBinding, call_key};
use super::connections::Grant;
use super::{Approvals, Ask, Decided, Gate, GateError, Requirement};
use crate::audit::Origin;
use crate::domain::Principal;
use crate::forms::{Form, FormScope, Submission};
use crate::providers::Provider;
use crate::secret::Secret;
use crate::store::{ElicitationRecord, SessionRecord};

/// One tool call, as the gate sees it.
pub struct ToolCall<'a> {
    pub tool: &'a str,
    pub requires: &'a [Requirement],
    pub arguments: &'a Map<String, Value>,
    /// The OAuth client the caller's token was issued to (`oauth` mode): an approval is bound to it.
    pub client: Option<&'a str>,
    /// The call-scoped forms' descriptions with this call's arguments, by form id.
    pub details: &'a HashMap<String, String>,
    /// Where the call came from, for the audit trail.
    pub from: &'a Origin,
}

/// What one call may use: access tokens by provider (with the connection version they came from)
/// and submitted form values by form; and for an approved call the arguments the approvers saw,
/// which it runs with.
#[derive(Default)]
pub struct Credentials {
    tokens: HashMap<String, (Secret<String>, DateTime<Utc>)>,
    forms: HashMap<String, Submission>,
    approved_arguments: Option<Map<String, Value>>,
}

impl Credentials {
    /// The arguments an approval was given for, when the call needed one: the call runs with
    /// these (they equal the call's own by their canonical digest).
    pub fn approved_arguments(&self) -> Option<&Map<String, Value>> {
        self.approved_arguments.as_ref()
    }

    pub fn token(&self, provider: &str) -> Option<&Secret<String>> {
        self.tokens.get(provider).map(|(token, _)| token)
    }

    pub fn forms(&self) -> &HashMap<String, Submission> {
        &self.forms
    }

    /// Every secret this call holds, so results can be scrubbed of any an upstream echoes back.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.tokens.values().map(|(token, _)| token.expose().as_str()).chain(
            self.forms
                .values()
                .flat_map(|f| f.secrets.values().map(|s| s.expose().as_str())),
        )
    }
}

#[derive(Debug)]
pub enum Decision {
    Run(Credentials),
    /// The user must act in a browser: one elicitation per unmet requirement.
    Elicit(Vec<ElicitationRecord>),
    /// The user declined this requirement; reported once, then the next call elicits afresh.
    Declined(ElicitationRecord),
    /// An approver denied this very call, for this reason.
    Denied(String),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("tokens", &self.tokens.keys().collect::<Vec<_>>())
            .field("forms", &self.forms.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn sign_in(provider: &Provider, scopes: Vec<String>) -> Ask {
    let message = if scopes.is_empty() {
        format!("Authorization is required to access your {} account.", provider.name)
    } else {
        format!(
            "Authorization is required to access your {} account ({}).",
            provider.name,
            scopes.join(", ")
        )
    };
    Ask {
        requirement: Requirement::Provider {
            provider: provider.id.clone(),
            scopes,
        },
        message,
        call_key: None,
        detail: None,
        ttl: None,
        binding: None,
    }
}

fn fill_in(form: &Form, call_key: Option<String>, detail: Option<String>) -> Ask {
    let message = match form.scope {
        FormScope::Call => format!("Please confirm in your browser: {}.", form.title),
        FormScope::User => format!("Please fill in \"{}\" in your browser.", form.title),
    };
    Ask {
        requirement: Requirement::Form { form: form.id.clone() },
        message,
        call_key,
        detail,
        ttl: None,
        binding: None,
    }
}

impl Gate {
    /// Run, or what the user must do first.
    pub async fn decide(
        &self,
        principal: &Principal,
        session: &SessionRecord,
        call: &ToolCall<'_>,
    ) -> Result<Decision, GateError> {
        let mut credentials = Credentials::default();
        let mut missing = Vec::new();
        let mut call_forms = Vec::new();
        let mut approvals = Vec::new();
        for requirement in call.requires {
            match requirement {
                Requirement::Provider { provider, scopes } => {
                    let Some(provider) = self.connections.provider(provider).await? else {
                        continue;
                    };
                    match self.connections.grant(principal, &provider, scopes, call.from).await? {
                        Grant::Usable { token, version } => {
                            credentials.tokens.insert(provider.id.clone(), (token, version));
                        }
                        Grant::SignIn { scopes } => missing.push(sign_in(&provider, scopes)),
                    }
                }
                Requirement::Approval { approval } => {
                    let Some(approval) = self.approvals.get(approval) else {
                        continue;
                    };
                    // Approvers see every argument whole: a call too large to show is refused
                    // before anything is asked for it.
                    let size = Value::Object(call.arguments.clone()).to_string().len();
                    if size > approval.max_argument_bytes {
                        return Ok(Decision::Denied(format!(
                            "{} was not run: its arguments are {size} bytes as JSON, more than the {} bytes                              that approval `{}` shows its approvers (its `max_argument_bytes`). Nothing was asked                              of anyone; call it again with smaller arguments, or ask the operator to raise the limit.",
                            call.tool, approval.max_argument_bytes, approval.id
                        )));
                    }
                    approvals.push(approval.clone());
                }
                Requirement::Form { form } => {
                    let Some(form) = self.form_values.forms().get(form) else {
                        continue;
                    };
                    if form.scope == FormScope::Call {
                        call_forms.push(form);
                        continue;
                    }
                    match self.form_values.user_values(principal, &form.id).await? {
                        Some(values) => {
                            credentials.forms.insert(form.id.clone(), values);
                        }
                        None => missing.push(fill_in(form, None, None)),
                    }
                }
            }
        }
        // A call-scoped answer is used up when taken, so it is taken only once nothing else is
        // missing; until then the other requirements are asked for first. The call's key (a hash
        // of its arguments) is made only for a call that has such an answer or approval to find.
        if missing.is_empty() && !(call_forms.is_empty() && approvals.is_empty()) {
            let key = call_key(call.tool, call.arguments);
            for form in call_forms {
                match self
                    .form_values
                    .take_call_answer(principal, &session.id, &form.id, &key)
                    .await?
                {
                    Some(answer) => {
                        credentials.forms.insert(form.id.clone(), answer);
                    }
                    None => missing.push(fill_in(form, Some(key.clone()), call.details.get(&form.id).cloned())),
                }
            }
            // Approvals are asked for last: an approver decides on a call that can run.
            if missing.is_empty() {
                for approval in &approvals {
                    match self
                        .approvals
                        .take_decision(principal, call.client, approval, &key)
                        .await?
                    {
                        Some(Decided::Approved { arguments }) => {
                            credentials.approved_arguments = Some(arguments);
                        }
                        Some(Decided::Denied { reason }) => {
                            return Ok(Decision::Denied(format!(
                                "{} was not approved ({}): {reason}. Do not call it again unless the user asks to.",
                                call.tool, approval.title
                            )));
                        }
                        None => {
                            let binding = CallBinding {
                                client: call.client.map(str::to_owned),
                                tool: call.tool.to_owned(),
                                arguments: call.arguments.clone(),
                            };
                            let ask = Approvals::ask(approval, binding, key.clone());
                            // A request nobody decided in time is reported once, as a denial is.
                            if self
                                .elicitations
                                .take_unreported_expiry(principal, session, &ask)
                                .await?
                                .is_some()
                            {
                                return Ok(Decision::Denied(format!(
                                    "{} was not approved ({}): the request expired before an approver decided. \
                                     Call it again only if the user asks to; that asks for approval anew.",
                                    call.tool, approval.title
                                )));
                            }
                            missing.push(ask);
                        }
                    }
                }
            }
        }
        if missing.is_empty() {
            return Ok(Decision::Run(credentials));
        }
        let mut elicitations = Vec::new();
        for ask in &missing {
            if let Some(declined) = self
                .elicitations
                .take_unreported_decline(principal, session, ask)
                .await?
            {
                return Ok(Decision::Declined(declined));
            }
            let (asked, new) = self.elicitations.ask(principal, session, ask, call.from).await?;
            if let Requirement::Approval { approval } = &ask.requirement
                && let Some(approval) = self.approvals.get(approval)
                && new
            {
                self.approvals.requested(approval, &asked, call.arguments);
            }
            elicitations.push(asked);
        }
        Ok(Decision::Elicit(elicitations))
    }

    /// What `principal` still lacks for `requires`, one sentence each, without asking for anything
    /// or calling a provider: for `whoami` and the connections page. Call-scoped forms are asked
    /// for on every call and so are always listed.
    pub async fn unmet(&self, principal: &Principal, requires: &[Requirement]) -> Result<Vec<String>, GateError> {
        let connections = self.connections.summaries(principal).await?;
        let mut unmet = Vec::new();
        for requirement in requires {
            match requirement {
                Requirement::Provider { provider, scopes } => {
                    let Some(provider) = self.connections.provider(provider).await? else {
                        continue;
                    };
                    let connected = connections
                        .iter()
                        .any(|c| c.provider == provider.id && c.active && scopes.iter().all(|s| c.scopes.contains(s)));
                    if !connected {
                        unmet.push(sign_in(&provider, scopes.clone()).message);
                    }
                }
                Requirement::Approval { approval } => {
                    if let Some(approval) = self.approvals.get(approval) {
                        unmet.push(format!("Each call needs approval: {}.", approval.title));
                    }
                }
                Requirement::Form { form } => {
                    let Some(form) = self.form_values.forms().get(form) else {
                        continue;
                    };
                    match form.scope {
                        FormScope::Call => unmet.push(format!("Confirm each call in the browser: {}.", form.title)),
                        FormScope::User => {
                            if self.form_values.user_values(principal, &form.id).await?.is_none() {
                                unmet.push(fill_in(form, None, None).message);
                            }
                        }
                    }
                }
            }
        }
        Ok(unmet)
    }

    /// The provider refused the token a call used: its connection is broken (unless it was
    /// refreshed meanwhile) and the next decision elicits a new sign-in.
    pub async fn credential_rejected(
        &self,
        principal: &Principal,
        provider: &str,
        credentials: &Credentials,
        from: &Origin,
    ) -> Result<(), GateError> {
        match credentials.tokens.get(provider) {
            Some((_, version)) => {
                self.connections
                    .token_rejected(principal, provider, *version, from)
                    .await
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
