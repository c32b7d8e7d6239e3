//! The worker against a test host: a model that replays scripted chunks, timers the test fires,
//! and every posted message recorded.

use super::*;
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use gg_agent::{
    ChunkStream, FinishReason, GenerateOptions, StopReason, StreamChunk, ToolDefinition,
    ToolErrorKind,
};
use serde_json::json;
use std::collections::VecDeque;

/// Replays one list of chunks per generation, and records the tools each was given.
struct Replay {
    steps: RefCell<VecDeque<Vec<StreamChunk>>>,
    tools_seen: RefCell<Vec<Vec<String>>>,
    system_seen: RefCell<Vec<String>>,
}

impl ModelBackend for Replay {
    fn generate<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        tools: &'a [ToolDefinition],
        _options: &'a GenerateOptions,
    ) -> ChunkStream<'a> {
        self.tools_seen
            .borrow_mut()
            .push(tools.iter().map(|t| t.name.clone()).collect());
        if let Some(system) = messages.first() {
            self.system_seen.borrow_mut().push(system.text());
        }
        let chunks = self.steps.borrow_mut().pop_front().unwrap_or_else(|| {
            vec![StreamChunk::Done {
                reason: FinishReason::EndOfTurn,
            }]
        });
        futures::stream::iter(chunks.into_iter().map(Ok)).boxed_local()
    }
}

struct TestHost {
    posted: RefCell<Vec<WorkerMessage>>,
    spawner: futures::executor::LocalSpawner,
    model: Result<Rc<Replay>, String>,
    timers: RefCell<Vec<oneshot::Sender<()>>>,
    loads: RefCell<Vec<(String, String)>>,
}

impl Host for TestHost {
    fn post(&self, message: WorkerMessage) {
        self.posted.borrow_mut().push(message);
    }
    fn spawn(&self, task: LocalBoxFuture<'static, ()>) {
        self.spawner.spawn_local(task).expect("spawn");
    }
    fn sleep(&self, _ms: u32) -> LocalBoxFuture<'static, ()> {
        let (tx, rx) = oneshot::channel();
        self.timers.borrow_mut().push(tx);
        // A dropped timer never fires.
        rx.then(|r| match r {
            Ok(()) => futures::future::ready(()).boxed_local(),
            Err(_) => futures::future::pending().boxed_local(),
        })
        .boxed_local()
    }
    fn site(&self) -> String {
        "http://127.0.0.1:8080".into()
    }
    fn nonce(&self) -> String {
        "00112233445566778899aabbccddeeff".into()
    }
    fn model<'a>(
        &'a self,
        _settings: &'a TurnSettings,
        _agent: &'a mut Agent,
    ) -> LocalBoxFuture<'a, Result<Rc<dyn ModelBackend>, String>> {
        let model = self.model.clone().map(|m| m as Rc<dyn ModelBackend>);
        async move { model }.boxed_local()
    }
    fn load(
        &self,
        repository: String,
        model_size: String,
    ) -> LocalBoxFuture<'static, Result<(), String>> {
        self.loads
            .borrow_mut()
            .push((repository.clone(), model_size));
        async move {
            if repository.starts_with("http") {
                Ok(())
            } else {
                Err(format!(
                    "the model source {repository:?} is not an http address"
                ))
            }
        }
        .boxed_local()
    }
}

struct Setup {
    pool: LocalPool,
    host: Rc<TestHost>,
    model: Rc<Replay>,
    worker: Rc<Worker>,
}

fn setup(steps: Vec<Vec<StreamChunk>>) -> Setup {
    let pool = LocalPool::new();
    let model = Rc::new(Replay {
        steps: RefCell::new(steps.into()),
        tools_seen: RefCell::default(),
        system_seen: RefCell::default(),
    });
    let host = Rc::new(TestHost {
        posted: RefCell::default(),
        spawner: pool.spawner(),
        model: Ok(model.clone()),
        timers: RefCell::default(),
        loads: RefCell::default(),
    });
    let worker = Worker::new(host.clone());
    Setup {
        pool,
        host,
        model,
        worker,
    }
}

impl Setup {
    fn send(&mut self, request: WidgetRequest) {
        // Through the wire format, as the page sends it.
        let json = serde_json::to_value(WidgetEnvelope::new(request)).expect("json");
        self.worker.on_message(json);
        self.pool.run_until_stalled();
    }

    fn take(&self) -> Vec<WorkerMessage> {
        std::mem::take(&mut *self.host.posted.borrow_mut())
    }

    fn events(messages: &[WorkerMessage], turn: u64) -> Vec<&AgentEvent> {
        messages
            .iter()
            .filter_map(|m| match m {
                WorkerMessage::Agent { turn: t, event } if *t == turn => Some(event),
                _ => None,
            })
            .collect()
    }
}

fn settings(tools: &[&str]) -> TurnSettings {
    TurnSettings {
        repository: "http://127.0.0.1:8080/models/tiny".into(),
        model_size: "E2B".into(),
        thinking: false,
        max_iterations: 5,
        temperature: 0.0,
        image_tokens: gg_agent::DEFAULT_IMAGE_TOKENS,
        constrain_tool_calls: true,
        system_prompt: None,
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
    }
}

fn ask(turn: u64, text: &str, tools: &[&str]) -> WidgetRequest {
    WidgetRequest::Ask {
        turn,
        text: text.into(),
        images: Vec::new(),
        settings: settings(tools),
    }
}

fn call(name: &str, args: serde_json::Value) -> Vec<StreamChunk> {
    vec![
        StreamChunk::ToolCall {
            call: ToolCall::from_value(name, args),
        },
        StreamChunk::Done {
            reason: FinishReason::ToolCall,
        },
    ]
}

fn answer(text: &str) -> Vec<StreamChunk> {
    vec![
        StreamChunk::Token { text: text.into() },
        StreamChunk::Done {
            reason: FinishReason::EndOfTurn,
        },
    ]
}

/// The id of the only `RunTool` among `messages`, and its call.
fn run_tool(messages: &[WorkerMessage]) -> (u64, ToolCall) {
    let calls: Vec<_> = messages
        .iter()
        .filter_map(|m| match m {
            WorkerMessage::RunTool { id, call } => Some((*id, call.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1, "one RunTool in {messages:#?}");
    calls[0].clone()
}

fn is_done(event: &AgentEvent, want: StopReason) -> bool {
    matches!(event, AgentEvent::Done { reason } if *reason == want)
}

#[test]
fn a_turn_asks_the_page_by_id_and_posts_every_event() {
    let mut s = setup(vec![
        call("get_page_title", json!({})),
        answer("The page is Example."),
    ]);
    s.send(ask(
        7,
        "What is this page?",
        &["get_page_title", "read_page_content"],
    ));
    let posted = s.take();
    let (id, call) = run_tool(&posted);
    assert_eq!(call.name, "get_page_title");
    let events = Setup::events(&posted, 7);
    assert!(
        matches!(events.first(), Some(AgentEvent::ToolStart { .. })),
        "{events:#?}"
    );
    // Only the listed tools were declared, in the settings' order.
    assert_eq!(
        s.model.tools_seen.borrow()[0],
        vec!["get_page_title", "read_page_content"]
    );
    // Another id is not this call's answer.
    s.send(WidgetRequest::ToolResult {
        id: id + 100,
        result: Ok(ToolOutput::new(json!({"title": "Wrong"}))),
    });
    assert!(s.take().is_empty());
    s.send(WidgetRequest::ToolResult {
        id,
        result: Ok(ToolOutput::new(json!({"title": "Example"}))),
    });
    let posted = s.take();
    let events = Setup::events(&posted, 7);
    assert!(
        matches!(events[0], AgentEvent::ToolResult { name, output, .. } if name == "get_page_title" && output.value["title"] == "Example"),
        "{events:#?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::Token { text } if text.contains("Example"))),
        "{events:#?}"
    );
    assert!(is_done(events.last().unwrap(), StopReason::EndOfTurn));
    // The conversation is kept for the next turn: user, model call, tool answer, answer.
    let state = s.worker.state.borrow();
    assert!(state.running.is_none());
    assert!(state.tool_calls.is_empty());
    assert!(state.agent.as_ref().unwrap().messages().len() >= 3);
}

#[test]
fn tools_outside_the_turns_list_are_never_asked_of_the_page() {
    let mut s = setup(vec![
        call("click_element", json!({"ref": "e1"})),
        answer("I could not click."),
    ]);
    s.send(ask(1, "Click it", &["read_page_content", "snapshot_page"]));
    let posted = s.take();
    assert!(
        !posted.iter().any(|m| matches!(
            m,
            WorkerMessage::RunTool { .. } | WorkerMessage::DescribeElement { .. }
        )),
        "{posted:#?}"
    );
    let events = Setup::events(&posted, 1);
    assert!(
        events.iter().any(|e| matches!(e, AgentEvent::ToolError { error, .. } if error.message.contains("click_element"))),
        "{events:#?}"
    );
    assert!(is_done(events.last().unwrap(), StopReason::EndOfTurn));
    assert_eq!(
        s.model.tools_seen.borrow()[0],
        vec!["read_page_content", "snapshot_page"]
    );
}

#[test]
fn the_executor_refuses_undeclared_tools_with_a_clear_error() {
    let s = setup(Vec::new());
    let executor = PageExecutor {
        worker: s.worker.clone(),
        tools: vec![BuiltinTool::ReadPageContent],
    };
    for name in [
        "run_javascript",
        "take_screenshot",
        "click_element",
        "weather",
    ] {
        let error = executor
            .allowed(&ToolCall::from_value(name, json!({})))
            .expect_err(name);
        assert_eq!(error.kind, ToolErrorKind::Denied);
        assert!(
            error.message.contains(name) && error.message.contains("read_page_content"),
            "{error}"
        );
    }
    assert!(
        executor
            .allowed(&ToolCall::from_value("read_page_content", json!({})))
            .is_ok()
    );
    let none = PageExecutor {
        worker: s.worker.clone(),
        tools: Vec::new(),
    };
    let error = none
        .allowed(&ToolCall::from_value("get_page_title", json!({})))
        .unwrap_err();
    assert!(error.message.contains("allows no page tools"), "{error}");
}

#[test]
fn tool_lists_are_checked() {
    use BuiltinTool::*;
    let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        declared_tools(&names(&["snapshot_page", "click_element", "snapshot_page"])),
        Ok(vec![SnapshotPage, ClickElement])
    );
    assert_eq!(declared_tools(&[]), Ok(vec![]));
    assert_eq!(
        declared_tools(&names(&["read_page_content", "read", "eval"])),
        Err(names(&["read", "eval"]))
    );
}

#[test]
fn bad_turns_are_refused_with_their_only_event() {
    let mut s = setup(Vec::new());
    s.send(ask(1, "hi", &["read_page_content", "read"]));
    let posted = s.take();
    assert_eq!(posted.len(), 1, "{posted:#?}");
    assert!(
        matches!(&posted[0], WorkerMessage::Agent { turn: 1, event: AgentEvent::Error { error: AgentError::InvalidInput { message } } } if message.contains("\"read\"")),
        "{posted:#?}"
    );
    let mut bad_budget = settings(&[]);
    bad_budget.image_tokens = 3;
    s.send(WidgetRequest::Ask {
        turn: 2,
        text: "hi".into(),
        images: Vec::new(),
        settings: bad_budget,
    });
    let posted = s.take();
    assert!(
        matches!(
            &posted[0],
            WorkerMessage::Agent {
                turn: 2,
                event: AgentEvent::Error { .. }
            }
        ),
        "{posted:#?}"
    );
    assert!(s.worker.state.borrow().running.is_none());
}

#[test]
fn a_second_ask_while_one_runs_is_refused_and_stop_cancels_the_waiting_call() {
    let mut s = setup(vec![
        call("snapshot_page", json!({})),
        answer("never reached"),
    ]);
    s.send(ask(1, "Look", &["snapshot_page"]));
    let (id, _) = run_tool(&s.take());
    s.send(ask(2, "And this?", &["snapshot_page"]));
    let posted = s.take();
    assert!(
        matches!(&posted[..], [WorkerMessage::Agent { turn: 2, event: AgentEvent::Error { error: AgentError::InvalidInput { message } } }] if message.contains("stop it first")),
        "{posted:#?}"
    );
    s.send(WidgetRequest::Stop);
    let posted = s.take();
    let events = Setup::events(&posted, 1);
    assert!(
        is_done(events.last().expect("events"), StopReason::Cancelled),
        "{events:#?}"
    );
    assert!(s.worker.state.borrow().running.is_none());
    assert!(s.worker.state.borrow().tool_calls.is_empty());
    // The page's late answer is ignored.
    s.send(WidgetRequest::ToolResult {
        id,
        result: Ok(ToolOutput::new(json!({}))),
    });
    assert!(s.take().is_empty());
    // The model was asked once: the loop did not go on.
    assert_eq!(s.model.tools_seen.borrow().len(), 1);
}

#[test]
fn a_page_that_does_not_answer_times_out_with_a_clear_error() {
    let mut s = setup(vec![call("get_page_title", json!({})), answer("no title")]);
    s.send(ask(3, "Title?", &["get_page_title"]));
    let (id, _) = run_tool(&s.take());
    let timers: Vec<_> = s.host.timers.borrow_mut().drain(..).collect();
    assert_eq!(timers.len(), 1);
    for t in timers {
        let _ = t.send(());
    }
    s.pool.run_until_stalled();
    let posted = s.take();
    let events = Setup::events(&posted, 3);
    assert!(
        events.iter().any(|e| matches!(e, AgentEvent::ToolError { error, .. } if error.kind == ToolErrorKind::Timeout && error.message.contains("30 s") && error.message.contains("get_page_title"))),
        "{events:#?}"
    );
    assert!(is_done(events.last().unwrap(), StopReason::EndOfTurn));
    assert!(!s.worker.state.borrow().tool_calls.contains_key(&id));
}

#[test]
fn an_answer_of_an_unexpected_shape_fails_the_call_at_once() {
    let mut s = setup(vec![call("get_page_title", json!({})), answer("no title")]);
    s.send(ask(3, "Title?", &["get_page_title"]));
    let (id, _) = run_tool(&s.take());
    // The page posts the page tools' answers as they are; this one is not a Result.
    s.worker.on_message(json!({"protocol": "gemma-gem-widget/1",
        "body": {"type": "tool_result", "id": id, "result": {"value": "t"}}}));
    s.pool.run_until_stalled();
    let posted = s.take();
    let events = Setup::events(&posted, 3);
    assert!(
        events.iter().any(|e| matches!(e, AgentEvent::ToolError { error, .. } if error.kind == ToolErrorKind::Failed && error.message.contains("unexpected shape"))),
        "{events:#?}"
    );
    assert!(is_done(events.last().unwrap(), StopReason::EndOfTurn));
    assert!(
        !posted
            .iter()
            .any(|m| matches!(m, WorkerMessage::Error { .. }))
    );
}

#[test]
fn approvals_are_answered_by_call_id_and_only_when_asked() {
    let mut s = setup(vec![
        call("run_javascript", json!({"code": "document.title"})),
        answer("done"),
    ]);
    // Nothing runs: refused.
    s.send(WidgetRequest::Approval {
        call_id: "1".into(),
        decision: ApprovalDecision::AllowOnce,
    });
    let posted = s.take();
    assert!(
        matches!(&posted[..], [WorkerMessage::Error { message }] if message.contains("no answer is being written")),
        "{posted:#?}"
    );
    s.send(ask(4, "Run it", &["run_javascript"]));
    let posted = s.take();
    let events = Setup::events(&posted, 4);
    let request = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::AwaitingApproval { request } => Some(request.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("an approval request in {events:#?}"));
    assert!(
        !posted
            .iter()
            .any(|m| matches!(m, WorkerMessage::RunTool { .. }))
    );
    // Another call id is not this request's answer.
    s.send(WidgetRequest::Approval {
        call_id: (request.call_id + 1).to_string(),
        decision: ApprovalDecision::AllowOnce,
    });
    let posted = s.take();
    assert!(
        matches!(&posted[..], [WorkerMessage::Error { message }] if message.contains("no approval is pending")),
        "{posted:#?}"
    );
    s.send(WidgetRequest::Approval {
        call_id: request.call_id.to_string(),
        decision: ApprovalDecision::AllowOnce,
    });
    let (id, call) = run_tool(&s.take());
    assert_eq!(call.name, "run_javascript");
    s.send(WidgetRequest::ToolResult {
        id,
        result: Ok(ToolOutput::new(json!({"result": "Example"}))),
    });
    let events_after = s.take();
    assert!(is_done(
        Setup::events(&events_after, 4).last().unwrap(),
        StopReason::EndOfTurn
    ));
}

#[test]
fn a_denied_approval_runs_nothing_and_stop_while_waiting_ends_the_turn() {
    let mut s = setup(vec![
        call("run_javascript", json!({"code": "1"})),
        answer("ok"),
        call("run_javascript", json!({"code": "2"})),
    ]);
    s.send(ask(1, "Run", &["run_javascript"]));
    let request_id = |posted: &[WorkerMessage]| {
        Setup::events(posted, 1)
            .iter()
            .find_map(|e| match e {
                AgentEvent::AwaitingApproval { request } => Some(request.call_id),
                _ => None,
            })
            .expect("approval request")
    };
    let call_id = request_id(&s.take());
    s.send(WidgetRequest::Approval {
        call_id: call_id.to_string(),
        decision: ApprovalDecision::Deny,
    });
    let posted = s.take();
    assert!(
        !posted
            .iter()
            .any(|m| matches!(m, WorkerMessage::RunTool { .. }))
    );
    assert!(is_done(
        Setup::events(&posted, 1).last().unwrap(),
        StopReason::EndOfTurn
    ));
    // The next turn waits for an approval; Stop ends it.
    s.send(WidgetRequest::Ask {
        turn: 2,
        text: "Again".into(),
        images: Vec::new(),
        settings: settings(&["run_javascript"]),
    });
    let posted = s.take();
    assert!(
        Setup::events(&posted, 2)
            .iter()
            .any(|e| matches!(e, AgentEvent::AwaitingApproval { .. }))
    );
    s.send(WidgetRequest::Stop);
    let posted = s.take();
    assert!(
        !posted
            .iter()
            .any(|m| matches!(m, WorkerMessage::RunTool { .. }))
    );
    assert!(is_done(
        Setup::events(&posted, 2).last().unwrap(),
        StopReason::Cancelled
    ));
}

#[test]
fn the_system_prompt_and_clear() {
    let mut s = setup(vec![answer("one"), answer("two")]);
    let mut custom = settings(&[]);
    custom.system_prompt = Some("You answer questions about Example Shop.".into());
    s.send(WidgetRequest::Ask {
        turn: 1,
        text: "hi".into(),
        images: Vec::new(),
        settings: custom,
    });
    assert!(s.model.system_seen.borrow()[0].contains("Example Shop"));
    assert!(
        !s.worker
            .state
            .borrow()
            .agent
            .as_ref()
            .unwrap()
            .messages()
            .is_empty()
    );
    s.send(WidgetRequest::Clear);
    assert!(
        s.take()
            .iter()
            .all(|m| !matches!(m, WorkerMessage::Error { .. }))
    );
    let state = s.worker.state.borrow();
    let kept: Vec<_> = state
        .agent
        .as_ref()
        .unwrap()
        .messages()
        .iter()
        .filter(|m| m.role != gg_agent::Role::System)
        .collect();
    assert!(kept.is_empty(), "{kept:#?}");
    drop(state);
    // Without a system prompt of its own the turn has the agent's.
    s.send(ask(2, "hi", &[]));
    assert_eq!(
        s.model.system_seen.borrow()[1],
        DEFAULT_SYSTEM_PROMPT,
        "the default system prompt"
    );
}

#[test]
fn clear_during_a_turn_forgets_the_conversation_when_it_ends() {
    let mut s = setup(vec![call("get_page_title", json!({})), answer("x")]);
    s.send(ask(1, "Title?", &["get_page_title"]));
    run_tool(&s.take());
    s.send(WidgetRequest::Clear);
    let posted = s.take();
    assert!(is_done(
        Setup::events(&posted, 1).last().unwrap(),
        StopReason::Cancelled
    ));
    let state = s.worker.state.borrow();
    assert!(state.running.is_none());
    assert!(
        state
            .agent
            .as_ref()
            .unwrap()
            .messages()
            .iter()
            .all(|m| m.role == gg_agent::Role::System)
    );
}

#[test]
fn a_model_that_cannot_load_ends_the_turn() {
    let pool = LocalPool::new();
    let host = Rc::new(TestHost {
        posted: RefCell::default(),
        spawner: pool.spawner(),
        model: Err("This browser has no WebGPU (navigator.gpu is missing).".into()),
        timers: RefCell::default(),
        loads: RefCell::default(),
    });
    let worker = Worker::new(host.clone());
    let mut s = Setup {
        pool,
        model: Rc::new(Replay {
            steps: RefCell::default(),
            tools_seen: RefCell::default(),
            system_seen: RefCell::default(),
        }),
        host,
        worker,
    };
    s.send(ask(5, "hi", &[]));
    let posted = s.take();
    assert!(
        matches!(&posted[..], [WorkerMessage::Agent { turn: 5, event: AgentEvent::Error { error: AgentError::Backend(BackendError::NotReady { message }) } }] if message.contains("WebGPU")),
        "{posted:#?}"
    );
    assert!(s.worker.state.borrow().running.is_none());
    // The next turn may start.
    s.send(ask(6, "hi", &[]));
    assert_eq!(s.take().len(), 1);
}

#[test]
fn load_requests_and_foreign_messages() {
    let mut s = setup(Vec::new());
    s.send(WidgetRequest::Load {
        repository: "http://127.0.0.1:8080/models/tiny".into(),
        model_size: "E2B".into(),
    });
    assert!(s.take().is_empty());
    s.send(WidgetRequest::Load {
        repository: "ftp://x".into(),
        model_size: "E2B".into(),
    });
    let posted = s.take();
    assert!(
        matches!(&posted[..], [WorkerMessage::Error { message }] if message.contains("ftp://x")),
        "{posted:#?}"
    );
    assert_eq!(s.host.loads.borrow().len(), 2);
    s.worker.on_message(json!({"type": "stop"}));
    s.worker
        .on_message(json!({"protocol": "gemma-gem-widget/0", "body": {"type": "stop"}}));
    let posted = s.take();
    assert_eq!(posted.len(), 2);
    assert!(posted.iter().all(
        |m| matches!(m, WorkerMessage::Error { message } if message.contains("gemma-gem-widget/1"))
    ));
}

#[test]
fn markdown_is_parsed_for_the_page_at_any_time() {
    let mut s = setup(vec![answer("Hi")]);
    // No turn runs; the answer's shape is the README's.
    s.worker.on_message(json!({"protocol": "gemma-gem-widget/1",
        "body": {"type": "parse_markdown", "id": 7, "text": "*a* [b](javascript:x) <i>c</i>"}}));
    let posted = s.take();
    let wire = serde_json::to_value(WidgetEnvelope::new(posted[0].clone())).expect("json");
    assert_eq!(
        wire["body"],
        json!({"markdown": {"id": 7, "events": [
            {"start": {"element": "p"}},
            {"start": {"element": "em"}}, {"text": "a"}, "end",
            {"text": " "}, {"start": {"link": {"href": null}}}, {"text": "b"}, "end",
            {"text": " <i>c</i>"},
            "end"
        ]}})
    );
    // After a turn as well.
    s.send(ask(1, "hello", &[]));
    s.send(WidgetRequest::ParseMarkdown {
        id: 8,
        text: "# T".into(),
    });
    let posted = s.take();
    assert!(
        posted.iter().any(|m| matches!(m, WorkerMessage::Markdown { id: 8, events }
            if events.first() == Some(&gg_markdown::MdEvent::Start(gg_markdown::MdTag::Element(gg_markdown::MdElement::H1))))),
        "{posted:#?}"
    );
}

/// The shapes the page's main thread reads (widget/worker/README.md).
#[test]
fn the_wire_shapes_of_the_readme() {
    let wire = |m: WorkerMessage| serde_json::to_value(WidgetEnvelope::new(m)).expect("json");
    let refused = wire(WorkerMessage::Agent {
        turn: 1,
        event: AgentEvent::Error {
            error: AgentError::InvalidInput {
                message: "m".into(),
            },
        },
    });
    assert_eq!(refused["protocol"], "gemma-gem-widget/1");
    assert_eq!(refused["body"]["agent"]["turn"], 1);
    assert_eq!(
        refused["body"]["agent"]["event"]["error"]["error"]["invalid_input"]["message"],
        "m"
    );
    let not_ready = wire(WorkerMessage::Agent {
        turn: 1,
        event: AgentEvent::Error {
            error: AgentError::Backend(BackendError::NotReady {
                message: "m".into(),
            }),
        },
    });
    assert_eq!(
        not_ready["body"]["agent"]["event"]["error"]["error"]["backend"],
        json!({"not_ready": {"message": "m"}})
    );
    let done = wire(WorkerMessage::Agent {
        turn: 1,
        event: AgentEvent::Done {
            reason: StopReason::Cancelled,
        },
    });
    assert_eq!(
        done["body"]["agent"]["event"],
        json!({"done": {"reason": "cancelled"}})
    );
    // The page's answers.
    let answer: WidgetRequest = serde_json::from_value(json!({
        "type": "tool_result", "id": 3, "result": {"Ok": {"value": {"title": "x"}}}
    }))
    .expect("tool_result");
    assert!(matches!(
        answer,
        WidgetRequest::ToolResult {
            id: 3,
            result: Ok(_)
        }
    ));
    let approval: WidgetRequest = serde_json::from_value(json!({
        "type": "approval", "call_id": "2", "decision": "always_on_site"
    }))
    .expect("approval");
    assert_eq!(
        approval,
        WidgetRequest::Approval {
            call_id: "2".into(),
            decision: ApprovalDecision::AlwaysOnSite
        }
    );
}

/// Answers the only `describe_element` among `messages` with a form's submit button.
fn describe_submit(s: &mut Setup, messages: &[WorkerMessage]) {
    let ids: Vec<u64> = messages
        .iter()
        .filter_map(|m| match m {
            WorkerMessage::DescribeElement { id, .. } => Some(*id),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 1, "one DescribeElement in {messages:#?}");
    s.send(WidgetRequest::ElementFacts {
        id: ids[0],
        result: Ok(ElementFacts {
            is_submit: true,
            form: Some(gg_agent::FormFacts::default()),
            ..ElementFacts::default()
        }),
    });
}

#[test]
fn always_on_this_site_outlives_turns_and_clear() {
    let mut s = setup(vec![
        call("click_element", json!({"ref": "e1"})),
        answer("one"),
        call("click_element", json!({"ref": "e1"})),
        answer("two"),
    ]);
    s.send(ask(1, "Send the form", &["click_element"]));
    let posted = s.take();
    describe_submit(&mut s, &posted);
    let request = Setup::events(&s.take(), 1)
        .iter()
        .find_map(|e| match e {
            AgentEvent::AwaitingApproval { request } => Some(request.clone()),
            _ => None,
        })
        .expect("approval request");
    assert!(request.allow_always, "{request:#?}");
    s.send(WidgetRequest::Approval {
        call_id: request.call_id.to_string(),
        decision: ApprovalDecision::AlwaysOnSite,
    });
    let posted = s.take();
    assert!(
        Setup::events(&posted, 1)
            .iter()
            .any(|e| matches!(e, AgentEvent::PermissionGranted { site, .. } if site.contains("127.0.0.1:8080"))),
        "{posted:#?}"
    );
    let (id, _) = run_tool(&posted);
    s.send(WidgetRequest::ToolResult {
        id,
        result: Ok(ToolOutput::new(json!({"clicked": true}))),
    });
    s.take();
    s.send(WidgetRequest::Clear);
    s.send(ask(2, "Send it again", &["click_element"]));
    let posted = s.take();
    describe_submit(&mut s, &posted);
    let posted = s.take();
    assert!(
        !Setup::events(&posted, 2)
            .iter()
            .any(|e| matches!(e, AgentEvent::AwaitingApproval { .. })),
        "{posted:#?}"
    );
    run_tool(&posted);
}
