//! Scripted stand-ins for the model, the page and the user, for the agent loop tests.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use futures::future::LocalBoxFuture;
use futures::{StreamExt, stream};
use gg_agent::*;
use serde_json::{Value, json};

/// One item of a scripted model step.
#[derive(Debug, Clone)]
pub enum Scripted {
    Chunk(StreamChunk),
    Fail(BackendError),
    /// The stream is silent for this long (a model that is busy), then goes on.
    Delay(Duration),
}

/// A future that completes after `duration`, woken by a timer thread.
pub async fn sleep(duration: Duration) {
    let (sender, receiver) = futures::channel::oneshot::channel::<()>();
    std::thread::spawn(move || {
        std::thread::sleep(duration);
        let _ = sender.send(());
    });
    let _ = receiver.await;
}

pub fn tok(text: &str) -> Scripted {
    Scripted::Chunk(StreamChunk::Token { text: text.into() })
}

pub fn think(text: &str) -> Scripted {
    Scripted::Chunk(StreamChunk::Thinking { text: text.into() })
}

pub fn call(name: &str, args: Value) -> Scripted {
    Scripted::Chunk(StreamChunk::ToolCall {
        call: ToolCall::from_value(name, args),
    })
}

pub fn malformed(name: Option<&str>, raw: &str, error: &str) -> Scripted {
    Scripted::Chunk(StreamChunk::MalformedToolCall {
        name: name.map(Into::into),
        raw: raw.into(),
        error: error.into(),
    })
}

pub fn end_turn() -> Scripted {
    Scripted::Chunk(StreamChunk::Done {
        reason: FinishReason::EndOfTurn,
    })
}

pub fn end_for_tools() -> Scripted {
    Scripted::Chunk(StreamChunk::Done {
        reason: FinishReason::ToolCall,
    })
}

/// A model that plays back one scripted step per `generate` call and records what it was given.
#[derive(Default)]
pub struct ScriptedModel {
    steps: RefCell<VecDeque<Vec<Scripted>>>,
    /// The messages of every `generate` call.
    pub seen: RefCell<Vec<Vec<ChatMessage>>>,
    /// The tool names declared in every `generate` call.
    pub seen_tools: RefCell<Vec<Vec<String>>>,
}

impl ScriptedModel {
    pub fn new(steps: Vec<Vec<Scripted>>) -> Self {
        Self {
            steps: RefCell::new(steps.into()),
            ..Self::default()
        }
    }

    pub fn calls(&self) -> usize {
        self.seen.borrow().len()
    }

    /// The last message the model was given in its `step`-th call (0-based).
    pub fn last_message_of_step(&self, step: usize) -> ChatMessage {
        self.seen.borrow()[step]
            .last()
            .cloned()
            .expect("no messages")
    }

    pub fn remaining_steps(&self) -> usize {
        self.steps.borrow().len()
    }
}

impl ModelBackend for ScriptedModel {
    fn generate<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        tools: &'a [ToolDefinition],
        _options: &'a GenerateOptions,
    ) -> ChunkStream<'a> {
        self.seen.borrow_mut().push(messages.to_vec());
        self.seen_tools
            .borrow_mut()
            .push(tools.iter().map(|t| t.name.clone()).collect());
        let Some(step) = self.steps.borrow_mut().pop_front() else {
            return stream::iter([Err(BackendError::Failed {
                message: "the script has no more steps".into(),
            })])
            .boxed_local();
        };
        stream::iter(step)
            .then(|item| async move {
                match item {
                    Scripted::Chunk(chunk) => Some(Ok(chunk)),
                    Scripted::Fail(error) => Some(Err(error)),
                    Scripted::Delay(duration) => {
                        sleep(duration).await;
                        None
                    }
                }
            })
            .filter_map(futures::future::ready)
            .boxed_local()
    }
}

/// A page: a site, elements the gate can ask about, scripted tool results; records what ran.
pub struct ScriptedPage {
    pub site: String,
    pub elements: HashMap<ElementTarget, ElementFacts>,
    results: RefCell<HashMap<String, VecDeque<Result<ToolOutput, ToolError>>>>,
    /// Every call that was executed, in order.
    pub executed: RefCell<Vec<ToolCall>>,
    /// Every element the gate asked about.
    pub inspected: RefCell<Vec<ElementTarget>>,
    /// `execute` never finishes (a tool still running).
    pub hang_on_execute: bool,
    /// The element identity each executed call was bound to.
    pub executed_on: RefCell<Vec<Option<String>>>,
}

impl ScriptedPage {
    pub fn new(site: &str) -> Self {
        Self {
            site: site.into(),
            elements: HashMap::new(),
            results: RefCell::new(HashMap::new()),
            executed: RefCell::new(Vec::new()),
            inspected: RefCell::new(Vec::new()),
            hang_on_execute: false,
            executed_on: RefCell::new(Vec::new()),
        }
    }

    pub fn with_element(mut self, target: ElementTarget, facts: ElementFacts) -> Self {
        self.elements.insert(target, facts);
        self
    }

    /// Queues the result of the next call of `tool` (without one, a call returns `{"ok": true}`).
    pub fn then(self, tool: &str, result: Result<ToolOutput, ToolError>) -> Self {
        self.results
            .borrow_mut()
            .entry(tool.into())
            .or_default()
            .push_back(result);
        self
    }

    pub fn executed_names(&self) -> Vec<String> {
        self.executed
            .borrow()
            .iter()
            .map(|c| c.name.clone())
            .collect()
    }
}

impl ToolExecutor for ScriptedPage {
    fn execute<'a>(
        &'a self,
        call: &'a ToolCall,
    ) -> LocalBoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            if self.hang_on_execute {
                futures::future::pending::<()>().await;
            }
            self.executed.borrow_mut().push(call.clone());
            self.results
                .borrow_mut()
                .get_mut(&call.name)
                .and_then(VecDeque::pop_front)
                .unwrap_or_else(|| Ok(ToolOutput::new(json!({"ok": true}))))
        })
    }

    fn element_facts<'a>(
        &'a self,
        target: &'a ElementTarget,
    ) -> LocalBoxFuture<'a, Result<ElementFacts, ToolError>> {
        Box::pin(async move {
            self.inspected.borrow_mut().push(target.clone());
            self.elements
                .get(target)
                .cloned()
                .ok_or_else(|| match target {
                    ElementTarget::Ref(r) => ToolError::stale_ref(format!(
                        "{r} is no longer in the page; call snapshot_page for fresh refs"
                    )),
                    ElementTarget::Selector(s) => {
                        ToolError::not_found(format!("no element matches `{s}`"))
                    }
                })
        })
    }

    fn current_site(&self) -> LocalBoxFuture<'_, Result<String, ToolError>> {
        Box::pin(async move { Ok(self.site.clone()) })
    }

    fn execute_on<'a>(
        &'a self,
        call: &'a ToolCall,
        element: Option<&'a str>,
    ) -> LocalBoxFuture<'a, Result<ToolOutput, ToolError>> {
        self.executed_on
            .borrow_mut()
            .push(element.map(str::to_owned));
        self.execute(call)
    }
}

/// A user who answers approval prompts from a script and remembers what was asked.
#[derive(Default)]
pub struct ScriptedUser {
    pub decisions: RefCell<VecDeque<ApprovalDecision>>,
    pub asked: RefCell<Vec<ApprovalRequest>>,
    /// Never answers (the prompt stays open).
    pub never_answers: bool,
}

impl ScriptedUser {
    pub fn answering(decisions: &[ApprovalDecision]) -> Self {
        Self {
            decisions: RefCell::new(decisions.iter().copied().collect()),
            ..Self::default()
        }
    }
}

impl Approver for ScriptedUser {
    fn decide<'a>(&'a self, request: &'a ApprovalRequest) -> LocalBoxFuture<'a, ApprovalDecision> {
        Box::pin(async move {
            self.asked.borrow_mut().push(request.clone());
            if self.never_answers {
                futures::future::pending::<()>().await;
            }
            // Out of script: deny, and the test sees the extra request in `asked`.
            self.decisions
                .borrow_mut()
                .pop_front()
                .unwrap_or(ApprovalDecision::Deny)
        })
    }
}

pub fn input_facts(input_type: &str, name: &str) -> ElementFacts {
    ElementFacts {
        field: FieldFacts {
            tag: "input".into(),
            input_type: Some(input_type.into()),
            name: Some(name.into()),
            ..FieldFacts::default()
        },
        ..ElementFacts::default()
    }
}

pub fn button_facts() -> ElementFacts {
    ElementFacts {
        field: FieldFacts {
            tag: "button".into(),
            ..FieldFacts::default()
        },
        ..ElementFacts::default()
    }
}

pub fn env<'a>(
    model: &'a ScriptedModel,
    page: &'a ScriptedPage,
    user: &'a ScriptedUser,
    tokens: &'a dyn TokenCounter,
    cancel: CancellationToken,
) -> AgentEnv<'a> {
    AgentEnv {
        backend: model,
        executor: page,
        approver: user,
        tokens,
        cancel,
    }
}

/// Runs one user turn to the end and returns its events.
pub fn run_turn(
    agent: &mut Agent,
    text: &str,
    model: &ScriptedModel,
    page: &ScriptedPage,
    user: &ScriptedUser,
) -> Vec<AgentEvent> {
    let counter = ApproxTokenCounter::default();
    let env = env(model, page, user, &counter, CancellationToken::new());
    futures::executor::block_on(run_agent_loop(agent, ChatMessage::user(text), env).collect())
}

/// The event kinds, for compact assertions.
pub fn kinds(events: &[AgentEvent]) -> Vec<&'static str> {
    events
        .iter()
        .map(|event| match event {
            AgentEvent::Token { .. } => "token",
            AgentEvent::Thinking { .. } => "thinking",
            AgentEvent::ToolStart { .. } => "tool_start",
            AgentEvent::AwaitingApproval { .. } => "awaiting_approval",
            AgentEvent::PermissionGranted { .. } => "permission_granted",
            AgentEvent::ToolResult { .. } => "tool_result",
            AgentEvent::ToolError { .. } => "tool_error",
            AgentEvent::Done { .. } => "done",
            AgentEvent::Error { .. } => "error",
        })
        .collect()
}

pub fn last_stop(events: &[AgentEvent]) -> StopReason {
    match events.last() {
        Some(AgentEvent::Done { reason }) => reason.clone(),
        other => panic!("the run did not end with Done: {other:?}"),
    }
}

pub fn tool_errors(events: &[AgentEvent]) -> Vec<ToolError> {
    events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ToolError { error, .. } => Some(error.clone()),
            _ => None,
        })
        .collect()
}

/// The JSON response of a tool message.
pub fn response(message: &ChatMessage) -> Value {
    assert_eq!(message.role, Role::Tool, "{message:?}");
    message
        .tool_response
        .as_ref()
        .map(|r| r.response.clone())
        .expect("tool message without response")
}
