//! The worker's state and its answers to the page's requests, independent of the browser (the
//! browser side is a [`Host`]): one conversation, the running turn, the page-tool calls waiting
//! for the page's answers (by id), and the approvals waiting for the user's.

use futures::FutureExt;
use futures::StreamExt;
use futures::channel::oneshot;
use futures::future::{Either, LocalBoxFuture};
use gg_agent::{
    Agent, AgentConfig, AgentEnv, AgentError, AgentEvent, ApprovalDecision, ApprovalRequest,
    Approver, ApproxTokenCounter, BackendError, BuiltinTool, CancellationToken, ChatMessage,
    DEFAULT_SYSTEM_PROMPT, ElementFacts, ElementTarget, ModelBackend, ToolCall, ToolError,
    ToolExecutor, ToolOutput,
};
use gg_messages::widget::{TurnSettings, WidgetEnvelope, WidgetRequest, WorkerMessage};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// How long the page may take to run a tool or describe an element (milliseconds).
pub const PAGE_TIMEOUT_MS: u32 = 30_000;

/// What the worker needs from where it runs (the browser's worker global; a test double).
pub trait Host {
    /// Posts a message to the page's main thread.
    fn post(&self, message: WorkerMessage);
    /// Runs a task to completion in the background.
    fn spawn(&self, task: LocalBoxFuture<'static, ()>);
    /// Resolves after `ms` milliseconds.
    fn sleep(&self, ms: u32) -> LocalBoxFuture<'static, ()>;
    /// The origin of the page (a dedicated worker is always of its page's origin).
    fn site(&self) -> String;
    /// A fresh random approval nonce.
    fn nonce(&self) -> String;
    /// The model of a turn, loaded on demand (progress is the host's to report); may clamp the
    /// agent's context to the model's. `Err` is a message for the user.
    fn model<'a>(
        &'a self,
        settings: &'a TurnSettings,
        agent: &'a mut Agent,
    ) -> LocalBoxFuture<'a, Result<Rc<dyn ModelBackend>, String>>;
    /// Loads the model of `repository` now ([`WidgetRequest::Load`]). `Err` is a message for
    /// the user (the host has reported the model's failure already where it has a status).
    fn load(
        &self,
        repository: String,
        model_size: String,
    ) -> LocalBoxFuture<'static, Result<(), String>>;
}

/// The running turn.
struct Running {
    cancel: CancellationToken,
    /// Clear arrived while it ran: the conversation is forgotten when it ends.
    forget: bool,
}

/// Calls waiting for the page's answer, by id.
type Waiting<T> = HashMap<u64, oneshot::Sender<Result<T, ToolError>>>;

#[derive(Default)]
struct State {
    /// The one conversation; taken out while a turn runs.
    agent: Option<Agent>,
    running: Option<Running>,
    /// The running turn's approvals, by call id (decimal).
    approvals: gg_web::turn::Approvals,
    next_id: u64,
    tool_calls: Waiting<ToolOutput>,
    facts: Waiting<ElementFacts>,
}

impl State {
    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Every call waiting for the page gets `error` (the turn was stopped).
    fn fail_pending(&mut self, error: &ToolError) {
        for (_, tx) in self.tool_calls.drain() {
            let _ = tx.send(Err(error.clone()));
        }
        for (_, tx) in self.facts.drain() {
            let _ = tx.send(Err(error.clone()));
        }
    }
}

/// The worker: one conversation with the page it serves.
pub struct Worker {
    host: Rc<dyn Host>,
    state: RefCell<State>,
}

/// A warning in the console (on stderr in native tests, which have no console).
fn warn(message: &str) {
    #[cfg(target_arch = "wasm32")]
    gg_web::log::warn(message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("warning: {message}");
}

/// The error of calls that were waiting when the turn stopped.
fn stopped() -> ToolError {
    ToolError::unavailable("the turn was stopped before the page answered")
}

/// The built-in tools named by a turn's settings, in the order given; the unknown names as the
/// error.
pub fn declared_tools(names: &[String]) -> Result<Vec<BuiltinTool>, Vec<String>> {
    let mut tools = Vec::new();
    let mut unknown = Vec::new();
    for name in names {
        match BuiltinTool::from_name(name) {
            Some(tool) if !tools.contains(&tool) => tools.push(tool),
            Some(_) => {}
            None => unknown.push(name.clone()),
        }
    }
    if unknown.is_empty() {
        Ok(tools)
    } else {
        Err(unknown)
    }
}

impl Worker {
    pub fn new(host: Rc<dyn Host>) -> Rc<Self> {
        Rc::new(Self {
            host,
            state: RefCell::new(State::default()),
        })
    }

    fn post(&self, message: WorkerMessage) {
        self.host.post(message);
    }

    /// A message from the page: a [`WidgetEnvelope`] of a [`WidgetRequest`]; anything else is
    /// answered with [`WorkerMessage::Error`] and otherwise ignored.
    pub fn on_message(self: &Rc<Self>, message: serde_json::Value) {
        let answer = unreadable_answer(&message);
        match WidgetEnvelope::<WidgetRequest>::parse(message).or(answer) {
            Some(request) => self.handle(request),
            None => self.post(WorkerMessage::Error {
                message: format!(
                    "ignored a message that is not a {} request",
                    gg_messages::widget::WIDGET_PROTOCOL
                ),
            }),
        }
    }

    pub fn handle(self: &Rc<Self>, request: WidgetRequest) {
        match request {
            WidgetRequest::Load {
                repository,
                model_size,
            } => {
                let load = self.host.load(repository, model_size);
                let me = self.clone();
                self.host.spawn(
                    async move {
                        if let Err(message) = load.await {
                            me.post(WorkerMessage::Error { message });
                        }
                    }
                    .boxed_local(),
                );
            }
            WidgetRequest::Ask {
                turn,
                text,
                images,
                settings,
            } => self.ask(turn, text, images, settings),
            WidgetRequest::Stop => self.stop(),
            WidgetRequest::Clear => {
                let mut state = self.state.borrow_mut();
                match &mut state.running {
                    Some(running) => running.forget = true,
                    None => {
                        if let Some(agent) = state.agent.as_mut() {
                            agent.clear_context();
                        }
                    }
                }
                drop(state);
                self.stop();
            }
            WidgetRequest::ToolResult { id, result } => {
                let tx = self.state.borrow_mut().tool_calls.remove(&id);
                match tx {
                    Some(tx) => {
                        let _ = tx.send(result);
                    }
                    None => warn(&format!(
                        "the page answered tool call {id}, which waits no more (it timed out or the turn stopped)"
                    )),
                }
            }
            WidgetRequest::ElementFacts { id, result } => {
                let tx = self.state.borrow_mut().facts.remove(&id);
                match tx {
                    Some(tx) => {
                        let _ = tx.send(result);
                    }
                    None => warn(&format!(
                        "the page described element {id}, which waits no more (it timed out or the turn stopped)"
                    )),
                }
            }
            WidgetRequest::Approval { call_id, decision } => {
                let mut state = self.state.borrow_mut();
                let message = if state.running.is_none() {
                    Some(format!(
                        "no answer is being written; the approval of call {call_id} was ignored"
                    ))
                } else if !state.approvals.answer(&call_id, decision) {
                    Some(format!(
                        "no approval is pending for call {call_id}; the answer was ignored"
                    ))
                } else {
                    None
                };
                drop(state);
                if let Some(message) = message {
                    self.post(WorkerMessage::Error { message });
                }
            }
            WidgetRequest::ParseMarkdown { id, text } => self.post(WorkerMessage::Markdown {
                id,
                events: gg_markdown::parse(&text),
            }),
        }
    }

    /// Stops the running turn: the loop stops, calls waiting for the page and approvals waiting
    /// for the user end.
    fn stop(&self) {
        let mut state = self.state.borrow_mut();
        if let Some(running) = &state.running {
            running.cancel.cancel();
            state.fail_pending(&stopped());
            state.approvals.clear();
        }
    }

    /// Refuses turn `turn` before it starts (its only event).
    fn refuse(&self, turn: u64, message: String) {
        self.post(WorkerMessage::Agent {
            turn,
            event: AgentEvent::Error {
                error: AgentError::InvalidInput { message },
            },
        });
    }

    fn ask(
        self: &Rc<Self>,
        turn: u64,
        text: String,
        images: Vec<gg_agent::ImagePart>,
        settings: TurnSettings,
    ) {
        if let Err(message) = gg_agent::ImagePart::check_user_images(&images) {
            return self.refuse(turn, format!("the message was not sent: {message}"));
        }
        if !gg_agent::IMAGE_TOKEN_BUDGETS.contains(&settings.image_tokens) {
            return self.refuse(
                turn,
                format!(
                    "{} soft tokens per image is not a budget the model supports (one of {:?})",
                    settings.image_tokens,
                    gg_agent::IMAGE_TOKEN_BUDGETS
                ),
            );
        }
        let tools = match declared_tools(&settings.tools) {
            Ok(tools) => tools,
            Err(unknown) => {
                let known: Vec<&str> = BuiltinTool::ALL.iter().map(|t| t.name()).collect();
                return self.refuse(
                    turn,
                    format!(
                        "unknown tools {unknown:?} in the turn's settings (the tools are {})",
                        known.join(", ")
                    ),
                );
            }
        };
        let cancel = CancellationToken::new();
        let agent = {
            let mut state = self.state.borrow_mut();
            if state.running.is_some() {
                drop(state);
                return self.refuse(
                    turn,
                    "an answer is still being written; stop it first".to_owned(),
                );
            }
            state.running = Some(Running {
                cancel: cancel.clone(),
                forget: false,
            });
            let mut agent = state
                .agent
                .take()
                .unwrap_or_else(|| Agent::new(AgentConfig::default()));
            configure(&mut agent, &settings, &tools);
            agent
        };
        let me = self.clone();
        let message = ChatMessage::user_with_images(text, images);
        self.host.spawn(
            async move {
                let agent = me
                    .run_turn(turn, agent, settings, tools, message, cancel)
                    .await;
                me.finish(agent);
            }
            .boxed_local(),
        );
    }

    async fn run_turn(
        self: &Rc<Self>,
        turn: u64,
        mut agent: Agent,
        settings: TurnSettings,
        tools: Vec<BuiltinTool>,
        message: ChatMessage,
        cancel: CancellationToken,
    ) -> Agent {
        let backend = match self.host.model(&settings, &mut agent).await {
            Ok(backend) => backend,
            Err(message) => {
                self.post(WorkerMessage::Agent {
                    turn,
                    event: AgentEvent::Error {
                        error: AgentError::Backend(BackendError::NotReady { message }),
                    },
                });
                return agent;
            }
        };
        let executor = PageExecutor {
            worker: self.clone(),
            tools,
        };
        let approver = PageApprover {
            worker: self.clone(),
        };
        let estimate = ApproxTokenCounter::default();
        let tokens = backend.token_counter().unwrap_or(&estimate);
        let env = AgentEnv {
            backend: &*backend,
            executor: &executor,
            approver: &approver,
            tokens,
            cancel,
        };
        {
            let mut events = gg_agent::run_agent_loop(&mut agent, message, env);
            while let Some(event) = events.next().await {
                if let AgentEvent::AwaitingApproval { request } = &event {
                    let key = request.call_id.to_string();
                    self.state.borrow_mut().approvals.issue(key);
                }
                self.post(WorkerMessage::Agent { turn, event });
            }
        }
        agent
    }

    /// The turn ended: the conversation is kept (or forgotten after a Clear).
    fn finish(&self, mut agent: Agent) {
        let mut state = self.state.borrow_mut();
        if state.running.as_ref().is_some_and(|r| r.forget) {
            agent.clear_context();
        }
        state.agent = Some(agent);
        state.running = None;
        state.approvals.clear();
        state.fail_pending(&stopped());
    }

    /// Asks the page (`post` builds the message from the call's id) and waits for its answer,
    /// at most [`PAGE_TIMEOUT_MS`].
    async fn ask_page<T>(
        &self,
        table: fn(&mut State) -> &mut Waiting<T>,
        post: impl FnOnce(u64) -> WorkerMessage,
        what: &str,
    ) -> Result<T, ToolError> {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut state = self.state.borrow_mut();
            let id = state.next_id();
            table(&mut state).insert(id, tx);
            id
        };
        self.post(post(id));
        let timeout = self.host.sleep(PAGE_TIMEOUT_MS);
        match futures::future::select(rx, timeout).await {
            Either::Left((Ok(result), _)) => result,
            Either::Left((Err(_), _)) => Err(stopped()),
            Either::Right(((), _)) => {
                table(&mut self.state.borrow_mut()).remove(&id);
                Err(ToolError::timeout(format!(
                    "the page did not {what} within {} s",
                    PAGE_TIMEOUT_MS / 1000
                )))
            }
        }
    }
}

/// The agent's settings for a turn: the page's choices of the moment.
fn configure(agent: &mut Agent, settings: &TurnSettings, tools: &[BuiltinTool]) {
    let config = agent.config_mut();
    config.max_iterations = settings.max_iterations.max(1);
    config.options.thinking = settings.thinking;
    config.options.temperature = settings.temperature.clamp(0.0, 2.0);
    config.options.image_tokens = settings.image_tokens;
    config.options.constrain_tool_calls = settings.constrain_tool_calls;
    config.system_prompt = settings
        .system_prompt
        .clone()
        .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_owned());
    config.tools = tools
        .iter()
        .map(|&t| gg_agent::builtin::definition(t))
        .collect();
}

/// Runs page tools by asking the page's main thread ([`WorkerMessage::RunTool`]), only those the
/// turn declared.
struct PageExecutor {
    worker: Rc<Worker>,
    tools: Vec<BuiltinTool>,
}

impl PageExecutor {
    fn allowed(&self, call: &ToolCall) -> Result<(), ToolError> {
        if BuiltinTool::from_name(&call.name).is_some_and(|t| self.tools.contains(&t)) {
            return Ok(());
        }
        Err(ToolError::denied(gg_vocab::not_allowed(
            &call.name,
            &self.tools,
        )))
    }
}

impl ToolExecutor for PageExecutor {
    fn execute<'a>(
        &'a self,
        call: &'a ToolCall,
    ) -> LocalBoxFuture<'a, Result<ToolOutput, ToolError>> {
        async move {
            self.allowed(call)?;
            self.worker
                .ask_page(
                    |s| &mut s.tool_calls,
                    |id| WorkerMessage::RunTool {
                        id,
                        call: call.clone(),
                    },
                    &format!("run {}", call.name),
                )
                .await
        }
        .boxed_local()
    }

    fn element_facts<'a>(
        &'a self,
        target: &'a ElementTarget,
    ) -> LocalBoxFuture<'a, Result<ElementFacts, ToolError>> {
        async move {
            self.worker
                .ask_page(
                    |s| &mut s.facts,
                    |id| WorkerMessage::DescribeElement {
                        id,
                        target: target.clone(),
                    },
                    &format!("describe {target}"),
                )
                .await
        }
        .boxed_local()
    }

    fn current_site(&self) -> LocalBoxFuture<'_, Result<String, ToolError>> {
        let site = self.worker.host.site();
        async move { Ok(site) }.boxed_local()
    }
}

/// A `tool_result` or `element_facts` of this protocol whose `result` is not in the expected
/// shape (the page posts the page tools' answers as they are): the call fails at once with a clear
/// error instead of waiting for its timeout.
fn unreadable_answer(message: &serde_json::Value) -> Option<WidgetRequest> {
    if message.get("protocol")?.as_str()? != gg_messages::widget::WIDGET_PROTOCOL {
        return None;
    }
    let body = message.get("body")?;
    let id = body.get("id")?.as_u64()?;
    let error = ToolError::new(
        gg_agent::ToolErrorKind::Failed,
        "the page tools gave an answer of an unexpected shape",
    );
    match body.get("type")?.as_str()? {
        "tool_result" => Some(WidgetRequest::ToolResult {
            id,
            result: Err(error),
        }),
        "element_facts" => Some(WidgetRequest::ElementFacts {
            id,
            result: Err(error),
        }),
        _ => None,
    }
}

/// Waits for the user's answer ([`WidgetRequest::Approval`] with the request's call id); a turn
/// that ends first counts as a denial.
struct PageApprover {
    worker: Rc<Worker>,
}

impl Approver for PageApprover {
    fn nonce(&self) -> String {
        self.worker.host.nonce()
    }

    fn decide<'a>(&'a self, request: &'a ApprovalRequest) -> LocalBoxFuture<'a, ApprovalDecision> {
        self.worker
            .state
            .borrow_mut()
            .approvals
            .wait(&request.call_id.to_string())
    }
}

#[cfg(test)]
mod tests;
