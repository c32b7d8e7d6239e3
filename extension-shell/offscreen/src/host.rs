//! The conversations of every tab, the running turns, and the agent's ways into the page
//! (through the service worker) and to the user (approvals from the overlay).

use futures::future::LocalBoxFuture;
use futures::{FutureExt, StreamExt};
use gg_agent::{
    Agent, AgentConfig, AgentEnv, AgentEvent, ApprovalDecision, ApprovalRequest, Approver,
    ApproxTokenCounter, CancellationToken, ChatMessage, ElementFacts, ElementTarget, ModelBackend,
    StopReason, ToolCall, ToolError, ToolErrorKind, ToolExecutor, ToolOutput,
};
use gg_chrome::log;
use gg_messages::{
    Broadcast, Context, ConversationView, OffscreenAnswer, OffscreenCommand, OffscreenReply,
    OffscreenRequest, PageBinding, RequestId,
};
use gg_web::turn::{Approvals, TurnModel};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

/// A tab's conversation with the pages of one origin.
#[derive(Default)]
struct Conversation {
    /// The agent; taken out while a turn runs.
    agent: Option<Agent>,
    /// The conversation as of the last finished turn (answers `GetTabConversation` mid-turn).
    saved: Vec<ChatMessage>,
}

/// One tab: a conversation per origin (nothing read on one origin is in the context of
/// another), and the one running turn.
#[derive(Default)]
struct Tab {
    conversations: HashMap<String, Conversation>,
    running: Option<CancellationToken>,
    /// The page the running turn is bound to.
    binding: Option<PageBinding>,
    /// Why the last turn stopped, when a newly opened overlay must say it (the page changed).
    notice: Option<String>,
    /// The running turn's approvals, by nonce.
    approvals: Approvals,
    seq: u64,
}

thread_local! {
    static TABS: RefCell<HashMap<i64, Tab>> = RefCell::new(HashMap::new());
    static NEXT_ID: Cell<u64> = const { Cell::new(100) };
}

fn next_id() -> RequestId {
    RequestId(NEXT_ID.with(|n| {
        let id = n.get();
        n.set(id + 1);
        id
    }))
}

fn with_tab<T>(tab_id: i64, f: impl FnOnce(&mut Tab) -> T) -> T {
    TABS.with(|tabs| f(tabs.borrow_mut().entry(tab_id).or_default()))
}

impl Tab {
    /// The conversation with `origin` (normalized), created empty.
    fn conversation(&mut self, origin: &str) -> &mut Conversation {
        self.conversations
            .entry(gg_agent::site_key(origin))
            .or_default()
    }
}

/// At most this many repositories per [`OffscreenCommand::GetStoredModels`] (the overlay asks
/// about two).
const MAX_REPOSITORIES_ASKED: usize = 8;

/// Why a request of the service worker was refused (the text is what the overlay shows).
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("a turn needs the page it is bound to")]
    Unbound,
    #[error("an answer is still being written in this tab; stop it first")]
    Busy,
    #[error("{0}")]
    Source(#[from] gg_web::turn::SourceError),
    #[error("too many repositories asked about ({asked}, at most {most})")]
    TooManyRepositories { asked: usize, most: usize },
    #[error("{0}")]
    Model(#[from] gg_web::download::LoadError),
    #[cfg(feature = "dev-probe")]
    #[error("{0}")]
    DevGreedy(#[from] gg_web::model::DevGreedyError),
    #[cfg(not(feature = "dev-probe"))]
    #[error("DevGreedy is answered by development builds only")]
    DevOnly,
    #[error("no answer is being written in this tab; approval for call {0} ignored")]
    NoTurn(u64),
    #[error("no approval is pending under that nonce; answer for call {0} ignored")]
    NoSuchNonce(u64),
    #[error("the message was not sent: {0}")]
    Images(String),
    #[error("{0} soft tokens per image is not a budget the model supports")]
    ImageTokens(u32),
}

fn new_agent(max_iterations: u32, thinking: bool) -> Agent {
    let mut config = AgentConfig {
        max_iterations: max_iterations.max(1),
        ..AgentConfig::default()
    };
    config.options.thinking = thinking;
    Agent::new(config)
}

pub async fn handle(command: OffscreenCommand) -> Result<OffscreenReply, HostError> {
    match command {
        OffscreenCommand::Ping => Ok(OffscreenReply::Pong),
        OffscreenCommand::RunTurn {
            tab_id,
            text,
            images,
            image_tokens,
            constrain_tool_calls,
            model_source,
            model_size,
            max_iterations,
            thinking,
            temperature,
            site_permissions,
            binding,
        } => {
            if binding.document_id.is_empty() {
                return Err(HostError::Unbound);
            }
            gg_agent::ImagePart::check_user_images(&images).map_err(HostError::Images)?;
            if !gg_agent::IMAGE_TOKEN_BUDGETS.contains(&image_tokens) {
                return Err(HostError::ImageTokens(image_tokens));
            }
            // Stored by the overlays; a damaged value must not stop the user from chatting.
            let permissions = match site_permissions {
                serde_json::Value::Null => Ok(gg_agent::SitePermissions::default()),
                json => serde_json::from_value::<gg_agent::SitePermissions>(json),
            }
            .unwrap_or_else(|e| {
                log::warn(&format!(
                    "stored site permissions are unreadable ({e}); none apply"
                ));
                gg_agent::SitePermissions::default()
            });
            if with_tab(tab_id, |t| t.running.is_some()) {
                return Err(HostError::Busy);
            }
            let model = TurnModel::for_source(&model_source, &model_size).await?;
            let cancel = CancellationToken::new();
            let agent = with_tab(tab_id, |t| {
                t.running = Some(cancel.clone());
                t.binding = Some(binding.clone());
                t.notice = None;
                let mut agent = t
                    .conversation(&binding.origin)
                    .agent
                    .take()
                    .unwrap_or_else(|| new_agent(max_iterations, thinking));
                agent.config_mut().max_iterations = max_iterations.max(1);
                agent.config_mut().options.thinking = thinking;
                agent.config_mut().options.temperature = temperature.clamp(0.0, 2.0);
                agent.config_mut().options.image_tokens = image_tokens;
                agent.config_mut().options.constrain_tool_calls = constrain_tool_calls;
                agent.set_permissions(permissions);
                agent
            });
            wasm_bindgen_futures::spawn_local(async move {
                let mut agent = agent;
                let backend = match model.backend(&mut agent, Some(tab_id)).await {
                    Ok(backend) => backend,
                    Err(_) => {
                        // Reported to the overlays by the model's status.
                        with_tab(tab_id, |t| {
                            t.conversation(&binding.origin).agent = Some(agent);
                            t.running = None;
                            t.binding = None;
                        });
                        return;
                    }
                };
                let message = ChatMessage::user_with_images(text, images);
                run_turn(tab_id, binding, agent, backend, message, cancel).await;
            });
            Ok(OffscreenReply::Ack)
        }
        OffscreenCommand::GetModelStatus => {
            Ok(OffscreenReply::ModelStatus(gg_web::model::current_status()))
        }
        OffscreenCommand::GetStoredModels { repositories } => {
            if repositories.len() > MAX_REPOSITORIES_ASKED {
                return Err(HostError::TooManyRepositories {
                    asked: repositories.len(),
                    most: MAX_REPOSITORIES_ASKED,
                });
            }
            let mut models = Vec::new();
            for repo in repositories {
                models.push(gg_web::model::stored(&repo).await?);
            }
            Ok(OffscreenReply::StoredModels { models })
        }
        OffscreenCommand::ClearModel { repository } => gg_web::model::clear_stored(&repository)
            .await
            .map(|m| OffscreenReply::StoredModels { models: vec![m] })
            .map_err(HostError::from),
        OffscreenCommand::DevGreedy {
            model_source,
            model_size,
            input_ids,
            max_new_tokens,
        } => {
            #[cfg(feature = "dev-probe")]
            {
                let repo = gg_messages::model_repository(&model_source, &model_size);
                Ok(OffscreenReply::DevGreedyResult(
                    gg_web::model::dev_greedy(&repo, &model_size, &input_ids, max_new_tokens)
                        .await?,
                ))
            }
            #[cfg(not(feature = "dev-probe"))]
            {
                let _ = (model_source, model_size, input_ids, max_new_tokens);
                Err(HostError::DevOnly)
            }
        }
        OffscreenCommand::CancelTurn { tab_id } => {
            if let Some(cancel) = with_tab(tab_id, |t| t.running.clone()) {
                cancel.cancel();
            }
            Ok(OffscreenReply::Ack)
        }
        OffscreenCommand::ForgetTab { tab_id } => {
            if let Some(tab) = TABS.with(|tabs| tabs.borrow_mut().remove(&tab_id))
                && let Some(cancel) = tab.running
            {
                cancel.cancel();
            }
            Ok(OffscreenReply::Ack)
        }
        OffscreenCommand::PageChanged {
            tab_id,
            document_id,
            url,
            same_document,
        } => {
            with_tab(tab_id, |t| {
                let (Some(cancel), Some(binding)) = (&t.running, &t.binding) else {
                    return;
                };
                if page_left(binding, &document_id, &url, same_document) {
                    log::info(&format!(
                        "tab {tab_id} left the page of its turn for {url}; the turn stops"
                    ));
                    cancel.cancel_because(StopReason::PageChanged { url: url.clone() });
                }
            });
            Ok(OffscreenReply::Ack)
        }
        OffscreenCommand::ApprovalAnswer {
            tab_id,
            call_id,
            nonce,
            decision,
        } => with_tab(tab_id, |t| {
            if t.running.is_none() {
                return Err(HostError::NoTurn(call_id));
            }
            // Only the nonce of a request that was shown counts, once.
            if !t.approvals.answer(&nonce, decision) {
                return Err(HostError::NoSuchNonce(call_id));
            }
            Ok(OffscreenReply::Ack)
        }),
        OffscreenCommand::ClearConversation { tab_id, origin } => {
            with_tab(tab_id, |t| {
                let running_here = t
                    .binding
                    .as_ref()
                    .is_some_and(|b| gg_agent::site_key(&b.origin) == gg_agent::site_key(&origin));
                if running_here && let Some(cancel) = &t.running {
                    cancel.cancel();
                }
                let conversation = t.conversation(&origin);
                if let Some(agent) = conversation.agent.as_mut() {
                    agent.clear_context();
                }
                conversation.saved.clear();
                t.notice = None;
            });
            Ok(OffscreenReply::Ack)
        }
        OffscreenCommand::RestoreConversation {
            tab_id,
            origin,
            messages,
        } => {
            with_tab(tab_id, |t| {
                let running_here = t.running.is_some()
                    && t.binding.as_ref().is_some_and(|b| {
                        gg_agent::site_key(&b.origin) == gg_agent::site_key(&origin)
                    });
                let conversation = t.conversation(&origin);
                // Only a document that lost the conversation (it was recreated) takes the stored one.
                if conversation.agent.is_none() && !running_here {
                    let mut agent = new_agent(10, false);
                    agent.restore_messages(messages);
                    conversation.saved = agent.messages().to_vec();
                    conversation.agent = Some(agent);
                }
            });
            Ok(OffscreenReply::Ack)
        }
        OffscreenCommand::GetTabConversation { tab_id, origin } => Ok(with_tab(tab_id, |t| {
            let running = t.running.is_some()
                && t.binding
                    .as_ref()
                    .is_some_and(|b| gg_agent::site_key(&b.origin) == gg_agent::site_key(&origin));
            let notice = t.notice.clone();
            let conversation = t.conversation(&origin);
            OffscreenReply::Conversation(ConversationView {
                tab_id,
                messages: conversation
                    .agent
                    .as_ref()
                    .map(|a| a.messages().to_vec())
                    .unwrap_or_else(|| conversation.saved.clone()),
                running,
                notice,
            })
        })),
    }
}

/// Whether a navigation report means the tab no longer shows the page a turn is bound to: a new
/// document in the top frame, or (same document) a URL of another origin.
fn page_left(binding: &PageBinding, document_id: &str, url: &str, same_document: bool) -> bool {
    if same_document {
        gg_agent::site_key(url) != gg_agent::site_key(&binding.origin)
    } else {
        document_id != binding.document_id
    }
}

async fn run_turn(
    tab_id: i64,
    binding: PageBinding,
    mut agent: Agent,
    backend: Rc<dyn ModelBackend>,
    message: ChatMessage,
    cancel: CancellationToken,
) {
    let binding_origin = binding.origin.clone();
    let executor = TabExecutor {
        tab_id,
        document_id: binding.document_id,
    };
    let approver = TabApprover { tab_id };
    // The model's own tokenizer counts the context; an estimate only for a backend without one.
    let estimate = ApproxTokenCounter::default();
    let tokens = backend.token_counter().unwrap_or(&estimate);
    {
        let env = AgentEnv {
            backend: &*backend,
            executor: &executor,
            approver: &approver,
            tokens,
            cancel,
        };
        let mut events = gg_agent::run_agent_loop(&mut agent, message, env);
        while let Some(event) = events.next().await {
            if let AgentEvent::AwaitingApproval { request } = &event {
                let nonce = request.nonce.clone();
                with_tab(tab_id, |t| t.approvals.issue(nonce));
            }
            if let AgentEvent::Done {
                reason: reason @ StopReason::PageChanged { .. },
            } = &event
            {
                let notice = reason.to_string();
                with_tab(tab_id, |t| t.notice = Some(notice));
            }
            broadcast(tab_id, event).await;
        }
    }
    let messages = agent.messages().to_vec();
    let origin = gg_agent::site_key(&binding_origin);
    if !TABS.with(|tabs| tabs.borrow().contains_key(&tab_id)) {
        // The tab was closed meanwhile (ForgetTab): nothing of it is kept.
        return;
    }
    with_tab(tab_id, |t| {
        let conversation = t.conversation(&origin);
        conversation.saved = messages.clone();
        conversation.agent = Some(agent);
        t.running = None;
        t.binding = None;
        t.approvals.clear();
    });
    if let Err(e) = gg_chrome::send::<_, OffscreenAnswer>(
        Context::Offscreen,
        next_id(),
        OffscreenRequest::ConversationSnapshot {
            tab_id,
            origin,
            messages,
        },
    )
    .await
    {
        log::error(&format!(
            "could not save the conversation of tab {tab_id}: {e}"
        ));
    }
}

/// Sends one agent event to every extension context; the overlay of `tab_id` shows it.
async fn broadcast(tab_id: i64, event: AgentEvent) {
    let seq = with_tab(tab_id, |t| {
        t.seq += 1;
        t.seq
    });
    if let Err(e) = gg_chrome::send::<_, OffscreenAnswer>(
        Context::Offscreen,
        next_id(),
        Broadcast::AgentEvent { tab_id, seq, event },
    )
    .await
    {
        log::warn(&format!("agent event for tab {tab_id} not delivered: {e}"));
    }
}

/// Asks the service worker and expects a specific answer.
async fn ask(request: OffscreenRequest) -> Result<OffscreenAnswer, ToolError> {
    match gg_chrome::send::<_, OffscreenAnswer>(Context::Offscreen, next_id(), request).await {
        Ok(Some(env)) => match env.body {
            OffscreenAnswer::Error { message } => {
                Err(ToolError::new(ToolErrorKind::Unavailable, message))
            }
            body => Ok(body),
        },
        Ok(None) => Err(ToolError::new(
            ToolErrorKind::Unavailable,
            "the extension did not answer",
        )),
        Err(e) => Err(ToolError::new(ToolErrorKind::Unavailable, e.to_string())),
    }
}

fn unexpected(body: OffscreenAnswer) -> ToolError {
    ToolError::new(ToolErrorKind::Failed, format!("unexpected answer {body:?}"))
}

/// Runs page tools in one document of one tab (the turn's page), through the service worker.
struct TabExecutor {
    tab_id: i64,
    document_id: String,
}

impl ToolExecutor for TabExecutor {
    fn execute<'a>(
        &'a self,
        call: &'a ToolCall,
    ) -> LocalBoxFuture<'a, Result<ToolOutput, ToolError>> {
        let call_id = format!("{}-{}", self.tab_id, next_id().0);
        async move {
            match ask(OffscreenRequest::TabToolCall {
                tab_id: self.tab_id,
                document_id: self.document_id.clone(),
                call_id,
                call: call.clone(),
            })
            .await?
            {
                OffscreenAnswer::ToolOutcome { result, .. } => result,
                other => Err(unexpected(other)),
            }
        }
        .boxed_local()
    }

    fn element_facts<'a>(
        &'a self,
        target: &'a ElementTarget,
    ) -> LocalBoxFuture<'a, Result<ElementFacts, ToolError>> {
        async move {
            match ask(OffscreenRequest::TabElementFacts {
                tab_id: self.tab_id,
                document_id: self.document_id.clone(),
                target: target.clone(),
            })
            .await?
            {
                OffscreenAnswer::ElementFacts { result } => result,
                other => Err(unexpected(other)),
            }
        }
        .boxed_local()
    }

    fn current_site(&self) -> LocalBoxFuture<'_, Result<String, ToolError>> {
        async move {
            match ask(OffscreenRequest::TabSite {
                tab_id: self.tab_id,
                document_id: self.document_id.clone(),
            })
            .await?
            {
                OffscreenAnswer::Site { site } => Ok(site),
                other => Err(unexpected(other)),
            }
        }
        .boxed_local()
    }
}

/// Waits for the user's answer in the tab's overlay. A turn that ends (cancel, new chat) drops
/// the pending answers, which counts as a denial.
struct TabApprover {
    tab_id: i64,
}

impl Approver for TabApprover {
    /// 128 bits from `crypto.getRandomValues`.
    fn nonce(&self) -> String {
        gg_web::turn::random_nonce()
    }

    fn decide<'a>(&'a self, request: &'a ApprovalRequest) -> LocalBoxFuture<'a, ApprovalDecision> {
        with_tab(self.tab_id, |t| t.approvals.wait(&request.nonce))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_leaves_its_page_on_a_new_document_or_another_origin() {
        let binding = PageBinding {
            document_id: "DOC1".into(),
            origin: "http://127.0.0.1:8000".into(),
        };
        assert!(!page_left(
            &binding,
            "DOC1",
            "http://127.0.0.1:8000/x",
            false
        ));
        assert!(page_left(&binding, "DOC2", "http://127.0.0.1:8000/", false));
        assert!(page_left(&binding, "DOC2", "http://localhost:8000/", false));
        assert!(!page_left(
            &binding,
            "DOC1",
            "http://127.0.0.1:8000/#step2",
            true
        ));
        assert!(page_left(&binding, "DOC1", "http://localhost:8000/", true));
        assert!(page_left(&binding, "DOC1", "http://127.0.0.1:8001/", true));
    }
}
