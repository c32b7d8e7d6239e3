//! The embeddable widget's two threads (issue 32): the page's main thread (`gg-widget`: the
//! `<gemma-gem-widget>` element, the UI, the in-page tools) and the dedicated Worker that hosts the
//! model and the agent loop (`gg-widget-worker`). They talk with `postMessage`, one JSON value per
//! message: [`WidgetRequest`] from the page to the worker, [`WorkerMessage`] back.
//!
//! Both sides are ours and the Worker object never leaves the widget's module, so the page cannot
//! post into this channel; every message is still parsed strictly and anything else is dropped
//! (the worker's `onmessage` also receives nothing but ours).

use gg_agent::{
    AgentError, AgentEvent, ApprovalDecision, ApprovalRequest, ElementFacts, ElementTarget,
    ImagePart, Permission, RiskClass, StopReason, ToolCall, ToolError, ToolOutput,
};
use gg_markdown::MdEvent;
use serde::{Deserialize, Serialize};

use crate::{AdapterReport, ModelReport};

/// Protocol tag of every widget message (bumped when the shapes change incompatibly).
pub const WIDGET_PROTOCOL: &str = "gemma-gem-widget/1";

/// What one turn runs with: the element's attributes as they were when the user asked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnSettings {
    /// Repository base URL in the Hugging Face layout (attribute `model-source`, resolved with
    /// `model-size` by [`crate::model_repository`]); `script:URL` in development builds.
    pub repository: String,
    /// `"E2B"` or `"E4B"` (attribute `model-size`).
    pub model_size: String,
    pub thinking: bool,
    pub max_iterations: u32,
    pub temperature: f32,
    /// Soft tokens per image.
    pub image_tokens: u32,
    pub constrain_tool_calls: bool,
    /// `None`: the agent's default system prompt (attribute `system-prompt`).
    pub system_prompt: Option<String>,
    /// The built-in tools declared to the model (attribute `tools`, after `scope` and the opt-ins
    /// were applied); the page side refuses any other call as well.
    pub tools: Vec<String>,
}

/// From the page's main thread to the worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WidgetRequest {
    /// Download (with progress) and load the model now, without asking anything (the panel was
    /// opened). A load of the same repository that runs or finished is joined.
    Load {
        repository: String,
        model_size: String,
    },
    /// The user (or `element.ask(text)`) sent a message: run one agent turn.
    Ask {
        /// Chosen by the page, increasing; echoed in [`WorkerMessage::Agent`].
        turn: u64,
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<ImagePart>,
        settings: TurnSettings,
    },
    /// Stop the running turn (nothing happens when none runs).
    Stop,
    /// Forget the conversation (stops a running turn first).
    Clear,
    /// The answer to [`WorkerMessage::RunTool`].
    ToolResult {
        id: u64,
        result: Result<ToolOutput, ToolError>,
    },
    /// The answer to [`WorkerMessage::DescribeElement`].
    ElementFacts {
        id: u64,
        result: Result<ElementFacts, ToolError>,
    },
    /// The user's answer to an [`AgentEvent::AwaitingApproval`] of the running turn.
    Approval {
        call_id: String,
        decision: ApprovalDecision,
    },
    /// Parse this Markdown (an answer being shown), answered with [`WorkerMessage::Markdown`]:
    /// the page's main thread links no Markdown parser. Answered at any time, turn or not.
    ParseMarkdown {
        /// Chosen by the page; echoed in the answer.
        id: u64,
        text: String,
    },
}

/// From the worker to the page's main thread. `Call` and `Target` are the typed tool call and
/// element target; the page parses them as JSON values ([`PageMessage`]).
///
/// Externally tagged on the wire (`{"agent": {"turn": 1, "event": {"token": {"text": "Hi"}}}}`),
/// and so are the agent event and the model report inside ([`wire_event`], [`wire_report`]): the
/// page's main thread parses these, and an internally tagged enum makes serde buffer each message
/// and parse it twice, code that weighed about 30 KB gzip of the page's bundle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerMessage<Call = ToolCall, Target = ElementTarget> {
    /// The worker runs; what WebGPU offers in it (`adapter: None` and a reason when nothing).
    Started { adapter: AdapterReport },
    /// Where the model stands (downloading with progress, initializing, ready, failed).
    ModelStatus(#[serde(with = "wire_report")] ModelReport),
    /// An event of the turn `turn` (tokens, tool steps, approvals, the end).
    Agent {
        turn: u64,
        #[serde(with = "wire_event")]
        event: AgentEvent,
    },
    /// Run a page tool in the page (answered with [`WidgetRequest::ToolResult`]).
    RunTool { id: u64, call: Call },
    /// Describe an element for the safety gate (answered with [`WidgetRequest::ElementFacts`]).
    DescribeElement { id: u64, target: Target },
    /// Something failed outside a turn (a bad message, the worker's own start).
    Error { message: String },
    /// The answer to [`WidgetRequest::ParseMarkdown`]: the text's events ([`gg_markdown::parse`]),
    /// which the page renders as inert DOM (checking link addresses again).
    Markdown { id: u64, events: Vec<MdEvent> },
}

/// A [`WorkerMessage`] as the page's main thread reads it: the tool call and the element target
/// stay JSON values, handed as they are to the page tools (which read every field defensively and
/// answer in the serde form of `Result<ToolOutput, ToolError>` / `Result<ElementFacts,
/// ToolError>`, posted back as they are), so the page links no typed parsing of them.
pub type PageMessage = WorkerMessage<serde_json::Value, serde_json::Value>;

/// [`AgentEvent`] in [`WorkerMessage::Agent`]: the same variants and fields, externally tagged,
/// and so is [`StopReason`] in `done` (`{"done": {"reason": "end_of_turn"}}`,
/// `{"done": {"reason": {"max_new_tokens": {"limit": 512}}}}`). The extension's messages and the
/// widget's DOM events keep the types' own (internally tagged) JSON.
pub mod wire_event {
    use super::*;
    use gg_agent::{ActionKind, BackendError, ContextOverflow, SensitiveField, SensitiveReason};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(event: &AgentEvent, s: S) -> Result<S::Ok, S::Error> {
        Event::from(event.clone()).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<AgentEvent, D::Error> {
        Event::deserialize(d).map(AgentEvent::from)
    }

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Event {
        Token {
            text: String,
        },
        Thinking {
            text: String,
        },
        ToolStart {
            call_id: u64,
            call: ToolCall,
            class: RiskClass,
        },
        AwaitingApproval {
            request: Approval,
        },
        PermissionGranted {
            site: String,
            permission: Permission,
        },
        ToolResult {
            call_id: u64,
            name: String,
            output: ToolOutput,
        },
        ToolError {
            call_id: u64,
            name: Option<String>,
            error: ToolError,
        },
        Done {
            reason: Stop,
        },
        Error {
            error: Failure,
        },
    }

    /// [`ApprovalRequest`] with its reasons externally tagged.
    #[derive(Serialize, Deserialize)]
    struct Approval {
        call_id: u64,
        nonce: String,
        allow_always: bool,
        element: Option<String>,
        site: String,
        call: ToolCall,
        reasons: Vec<Reason>,
        summary: String,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Reason {
        RunJavascript,
        TypeIntoSensitiveField { field: SensitiveField },
        SubmitSensitiveForm { fields: Vec<SensitiveField> },
        SubmitForm { method: String },
        Consequential { action: ActionKind, label: String },
        LeaveSite { destination: String },
        UnclassifiedTool { name: String },
        UnverifiedElement,
    }

    /// [`AgentError`] with a backend error externally tagged.
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Failure {
        Backend(Backend),
        ContextOverflow(ContextOverflow),
        InvalidInput { message: String },
    }

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Backend {
        NotReady { message: String },
        ContextTooLong { tokens: usize, limit: usize },
        Device { message: String },
        Failed { message: String },
    }

    impl From<ApprovalRequest> for Approval {
        fn from(r: ApprovalRequest) -> Self {
            Self {
                call_id: r.call_id,
                nonce: r.nonce,
                allow_always: r.allow_always,
                element: r.element,
                site: r.site,
                call: r.call,
                reasons: r.reasons.into_iter().map(Reason::from).collect(),
                summary: r.summary,
            }
        }
    }

    impl From<Approval> for ApprovalRequest {
        fn from(r: Approval) -> Self {
            Self {
                call_id: r.call_id,
                nonce: r.nonce,
                allow_always: r.allow_always,
                element: r.element,
                site: r.site,
                call: r.call,
                reasons: r.reasons.into_iter().map(SensitiveReason::from).collect(),
                summary: r.summary,
            }
        }
    }

    impl From<SensitiveReason> for Reason {
        fn from(r: SensitiveReason) -> Self {
            use SensitiveReason as S;
            match r {
                S::RunJavascript => Self::RunJavascript,
                S::TypeIntoSensitiveField { field } => Self::TypeIntoSensitiveField { field },
                S::SubmitSensitiveForm { fields } => Self::SubmitSensitiveForm { fields },
                S::SubmitForm { method } => Self::SubmitForm { method },
                S::Consequential { action, label } => Self::Consequential { action, label },
                S::LeaveSite { destination } => Self::LeaveSite { destination },
                S::UnclassifiedTool { name } => Self::UnclassifiedTool { name },
                S::UnverifiedElement => Self::UnverifiedElement,
            }
        }
    }

    impl From<Reason> for SensitiveReason {
        fn from(r: Reason) -> Self {
            use Reason as R;
            match r {
                R::RunJavascript => Self::RunJavascript,
                R::TypeIntoSensitiveField { field } => Self::TypeIntoSensitiveField { field },
                R::SubmitSensitiveForm { fields } => Self::SubmitSensitiveForm { fields },
                R::SubmitForm { method } => Self::SubmitForm { method },
                R::Consequential { action, label } => Self::Consequential { action, label },
                R::LeaveSite { destination } => Self::LeaveSite { destination },
                R::UnclassifiedTool { name } => Self::UnclassifiedTool { name },
                R::UnverifiedElement => Self::UnverifiedElement,
            }
        }
    }

    impl From<AgentError> for Failure {
        fn from(e: AgentError) -> Self {
            use BackendError as B;
            match e {
                AgentError::Backend(b) => Self::Backend(match b {
                    B::NotReady { message } => Backend::NotReady { message },
                    B::ContextTooLong { tokens, limit } => {
                        Backend::ContextTooLong { tokens, limit }
                    }
                    B::Device { message } => Backend::Device { message },
                    B::Failed { message } => Backend::Failed { message },
                }),
                AgentError::ContextOverflow(c) => Self::ContextOverflow(c),
                AgentError::InvalidInput { message } => Self::InvalidInput { message },
            }
        }
    }

    impl From<Failure> for AgentError {
        fn from(e: Failure) -> Self {
            use BackendError as B;
            match e {
                Failure::Backend(b) => Self::Backend(match b {
                    Backend::NotReady { message } => B::NotReady { message },
                    Backend::ContextTooLong { tokens, limit } => {
                        B::ContextTooLong { tokens, limit }
                    }
                    Backend::Device { message } => B::Device { message },
                    Backend::Failed { message } => B::Failed { message },
                }),
                Failure::ContextOverflow(c) => Self::ContextOverflow(c),
                Failure::InvalidInput { message } => Self::InvalidInput { message },
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Stop {
        EndOfTurn,
        MaxNewTokens { limit: u32 },
        MaxIterations { limit: u32 },
        Cancelled,
        PageChanged { url: String },
        RepeatedFailure { tool: String, error: String },
    }

    impl From<AgentEvent> for Event {
        fn from(event: AgentEvent) -> Self {
            match event {
                AgentEvent::Token { text } => Self::Token { text },
                AgentEvent::Thinking { text } => Self::Thinking { text },
                AgentEvent::ToolStart {
                    call_id,
                    call,
                    class,
                } => Self::ToolStart {
                    call_id,
                    call,
                    class,
                },
                AgentEvent::AwaitingApproval { request } => Self::AwaitingApproval {
                    request: request.into(),
                },
                AgentEvent::PermissionGranted { site, permission } => {
                    Self::PermissionGranted { site, permission }
                }
                AgentEvent::ToolResult {
                    call_id,
                    name,
                    output,
                } => Self::ToolResult {
                    call_id,
                    name,
                    output,
                },
                AgentEvent::ToolError {
                    call_id,
                    name,
                    error,
                } => Self::ToolError {
                    call_id,
                    name,
                    error,
                },
                AgentEvent::Done { reason } => Self::Done {
                    reason: match reason {
                        StopReason::EndOfTurn => Stop::EndOfTurn,
                        StopReason::MaxNewTokens { limit } => Stop::MaxNewTokens { limit },
                        StopReason::MaxIterations { limit } => Stop::MaxIterations { limit },
                        StopReason::Cancelled => Stop::Cancelled,
                        StopReason::PageChanged { url } => Stop::PageChanged { url },
                        StopReason::RepeatedFailure { tool, error } => {
                            Stop::RepeatedFailure { tool, error }
                        }
                    },
                },
                AgentEvent::Error { error } => Self::Error {
                    error: error.into(),
                },
            }
        }
    }

    impl From<Event> for AgentEvent {
        fn from(event: Event) -> Self {
            match event {
                Event::Token { text } => Self::Token { text },
                Event::Thinking { text } => Self::Thinking { text },
                Event::ToolStart {
                    call_id,
                    call,
                    class,
                } => Self::ToolStart {
                    call_id,
                    call,
                    class,
                },
                Event::AwaitingApproval { request } => Self::AwaitingApproval {
                    request: request.into(),
                },
                Event::PermissionGranted { site, permission } => {
                    Self::PermissionGranted { site, permission }
                }
                Event::ToolResult {
                    call_id,
                    name,
                    output,
                } => Self::ToolResult {
                    call_id,
                    name,
                    output,
                },
                Event::ToolError {
                    call_id,
                    name,
                    error,
                } => Self::ToolError {
                    call_id,
                    name,
                    error,
                },
                Event::Done { reason } => Self::Done {
                    reason: match reason {
                        Stop::EndOfTurn => StopReason::EndOfTurn,
                        Stop::MaxNewTokens { limit } => StopReason::MaxNewTokens { limit },
                        Stop::MaxIterations { limit } => StopReason::MaxIterations { limit },
                        Stop::Cancelled => StopReason::Cancelled,
                        Stop::PageChanged { url } => StopReason::PageChanged { url },
                        Stop::RepeatedFailure { tool, error } => {
                            StopReason::RepeatedFailure { tool, error }
                        }
                    },
                },
                Event::Error { error } => Self::Error {
                    error: error.into(),
                },
            }
        }
    }
}

/// [`ModelReport`] in [`WorkerMessage::ModelStatus`]: the same fields, with `state` externally
/// tagged (`{"initializing": {"stage": ...}}`, `"not_loaded"`, `{"downloading": {...}}`) where the
/// extension's messages tag it by `phase`.
pub mod wire_report {
    use super::*;
    use crate::{DownloadProgress, ModelErrorKind, ModelReport, ModelState};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(report: &ModelReport, s: S) -> Result<S::Ok, S::Error> {
        Report::from(report.clone()).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ModelReport, D::Error> {
        Report::deserialize(d).map(ModelReport::from)
    }

    #[derive(Serialize, Deserialize)]
    struct Report {
        seq: u64,
        epoch: u64,
        model_size: String,
        source: String,
        state: State,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum State {
        NotLoaded,
        Downloading(DownloadProgress),
        Initializing {
            stage: String,
        },
        Ready {
            dtype: String,
            adapter: String,
            unverified: Vec<String>,
        },
        Failed {
            tab_id: Option<i64>,
            kind: ModelErrorKind,
            message: String,
        },
    }

    impl From<ModelReport> for Report {
        fn from(r: ModelReport) -> Self {
            Self {
                seq: r.seq,
                epoch: r.epoch,
                model_size: r.model_size,
                source: r.source,
                state: match r.state {
                    ModelState::NotLoaded => State::NotLoaded,
                    ModelState::Downloading(p) => State::Downloading(p),
                    ModelState::Initializing { stage } => State::Initializing { stage },
                    ModelState::Ready {
                        dtype,
                        adapter,
                        unverified,
                    } => State::Ready {
                        dtype,
                        adapter,
                        unverified,
                    },
                    ModelState::Failed {
                        tab_id,
                        kind,
                        message,
                    } => State::Failed {
                        tab_id,
                        kind,
                        message,
                    },
                },
            }
        }
    }

    impl From<Report> for ModelReport {
        fn from(r: Report) -> Self {
            Self {
                seq: r.seq,
                epoch: r.epoch,
                model_size: r.model_size,
                source: r.source,
                state: match r.state {
                    State::NotLoaded => ModelState::NotLoaded,
                    State::Downloading(p) => ModelState::Downloading(p),
                    State::Initializing { stage } => ModelState::Initializing { stage },
                    State::Ready {
                        dtype,
                        adapter,
                        unverified,
                    } => ModelState::Ready {
                        dtype,
                        adapter,
                        unverified,
                    },
                    State::Failed {
                        tab_id,
                        kind,
                        message,
                    } => ModelState::Failed {
                        tab_id,
                        kind,
                        message,
                    },
                },
            }
        }
    }
}

/// One message on the wire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WidgetEnvelope<B> {
    pub protocol: String,
    pub body: B,
}

impl<B: Serialize + serde::de::DeserializeOwned> WidgetEnvelope<B> {
    pub fn new(body: B) -> Self {
        Self {
            protocol: WIDGET_PROTOCOL.to_owned(),
            body,
        }
    }

    /// Parses a message; `None` for anything that is not this protocol's.
    pub fn parse(value: serde_json::Value) -> Option<B> {
        let env: Self = serde_json::from_value(value).ok()?;
        (env.protocol == WIDGET_PROTOCOL).then_some(env.body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_strict_parsing() {
        let req = WidgetRequest::Ask {
            turn: 3,
            text: "hi".into(),
            images: Vec::new(),
            settings: TurnSettings {
                repository: "http://127.0.0.1:8080/models/x/".into(),
                model_size: "E2B".into(),
                thinking: false,
                max_iterations: 10,
                temperature: 1.0,
                image_tokens: 280,
                constrain_tool_calls: true,
                system_prompt: None,
                tools: vec!["read_page_content".into()],
            },
        };
        let json = serde_json::to_value(WidgetEnvelope::new(req.clone())).unwrap();
        assert_eq!(json["body"]["type"], "ask");
        assert_eq!(
            WidgetEnvelope::<WidgetRequest>::parse(json.clone()),
            Some(req)
        );
        let mut other = json.clone();
        other["protocol"] = "gemma-gem/1".into();
        assert_eq!(WidgetEnvelope::<WidgetRequest>::parse(other), None);
        assert_eq!(
            WidgetEnvelope::<WidgetRequest>::parse(serde_json::json!({"type": "stop"})),
            None
        );
        // A worker message is not a request.
        let msg =
            serde_json::to_value(WidgetEnvelope::<WorkerMessage>::new(WorkerMessage::Error {
                message: "x".into(),
            }))
            .unwrap();
        assert_eq!(WidgetEnvelope::<WidgetRequest>::parse(msg.clone()), None);
        // The page reads a tool call as the JSON value it is.
        let run: WorkerMessage = WorkerMessage::RunTool {
            id: 4,
            call: ToolCall::new(
                "snapshot_page",
                serde_json::json!({"max": 3})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        };
        let wire = serde_json::to_value(WidgetEnvelope::new(run)).unwrap();
        assert_eq!(
            WidgetEnvelope::<PageMessage>::parse(wire),
            Some(PageMessage::RunTool {
                id: 4,
                call: serde_json::json!({"name": "snapshot_page", "args": {"max": 3}})
            })
        );
        assert!(matches!(
            WidgetEnvelope::<PageMessage>::parse(msg),
            Some(PageMessage::Error { .. })
        ));
    }

    /// A model report's state is externally tagged on the widget's wire; it reads back as it was.
    #[test]
    fn model_reports_are_externally_tagged_on_the_wire() {
        use crate::{DownloadProgress, ModelErrorKind, ModelReport, ModelState};
        let states = [
            ModelState::NotLoaded,
            ModelState::Downloading(DownloadProgress {
                loaded_bytes: 1,
                total_bytes: 4,
                percent: 25.0,
                ..DownloadProgress::default()
            }),
            ModelState::Initializing { stage: "s".into() },
            ModelState::Ready {
                dtype: "q4".into(),
                adapter: "a".into(),
                unverified: vec!["f".into()],
            },
            ModelState::Failed {
                tab_id: None,
                kind: ModelErrorKind::DownloadFailed,
                message: "m".into(),
            },
        ];
        for state in states {
            let report = ModelReport {
                seq: 3,
                epoch: 9,
                model_size: "E2B".into(),
                source: "https://x/".into(),
                state,
            };
            let wire = serde_json::to_value(WidgetEnvelope::new(
                WorkerMessage::<ToolCall>::ModelStatus(report.clone()),
            ))
            .unwrap();
            assert_eq!(wire["body"]["model_status"]["seq"], 3, "{wire}");
            assert!(
                wire["body"]["model_status"]["state"].get("phase").is_none(),
                "{wire}"
            );
            assert_eq!(
                WidgetEnvelope::<PageMessage>::parse(wire),
                Some(PageMessage::ModelStatus(report))
            );
        }
        let wire = serde_json::to_value(WorkerMessage::<ToolCall>::ModelStatus(ModelReport {
            seq: 1,
            epoch: 2,
            model_size: "E2B".into(),
            source: "s".into(),
            state: ModelState::Initializing { stage: "x".into() },
        }))
        .unwrap();
        assert_eq!(
            wire["model_status"]["state"],
            serde_json::json!({"initializing": {"stage": "x"}})
        );
    }

    /// The agent events on the widget's wire are externally tagged, stop reasons too; each one
    /// reads back as the event it was.
    #[test]
    fn agent_events_are_externally_tagged_on_the_wire() {
        let call = ToolCall::new(
            "click_element",
            serde_json::json!({"ref": "e1"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        let events = [
            AgentEvent::Token { text: "a".into() },
            AgentEvent::Thinking { text: "b".into() },
            AgentEvent::ToolStart {
                call_id: 1,
                call: call.clone(),
                class: RiskClass::Act,
            },
            AgentEvent::ToolResult {
                call_id: 1,
                name: "click_element".into(),
                output: ToolOutput::new(serde_json::json!({"clicked": true})),
            },
            AgentEvent::ToolError {
                call_id: 2,
                name: None,
                error: ToolError::timeout("30 s"),
            },
            AgentEvent::Done {
                reason: StopReason::EndOfTurn,
            },
            AgentEvent::Done {
                reason: StopReason::MaxNewTokens { limit: 512 },
            },
            AgentEvent::Done {
                reason: StopReason::RepeatedFailure {
                    tool: "t".into(),
                    error: "e".into(),
                },
            },
            AgentEvent::Error {
                error: AgentError::InvalidInput {
                    message: "m".into(),
                },
            },
            AgentEvent::Error {
                error: AgentError::Backend(gg_agent::BackendError::ContextTooLong {
                    tokens: 9,
                    limit: 8,
                }),
            },
            AgentEvent::AwaitingApproval {
                request: ApprovalRequest::new(
                    4,
                    "https://a.example",
                    call.clone(),
                    vec![
                        gg_agent::SensitiveReason::RunJavascript,
                        gg_agent::SensitiveReason::SubmitForm {
                            method: "post".into(),
                        },
                        gg_agent::SensitiveReason::UnverifiedElement,
                    ],
                ),
            },
        ];
        for event in events {
            let wire =
                serde_json::to_value(WidgetEnvelope::new(WorkerMessage::<ToolCall>::Agent {
                    turn: 2,
                    event: event.clone(),
                }))
                .unwrap();
            assert_eq!(wire["body"]["agent"]["turn"], 2, "{wire}");
            assert!(
                wire["body"]["agent"]["event"].get("type").is_none(),
                "{wire}"
            );
            assert_eq!(
                WidgetEnvelope::<PageMessage>::parse(wire),
                Some(PageMessage::Agent { turn: 2, event })
            );
        }
        let done = serde_json::to_value(WidgetEnvelope::new(WorkerMessage::<ToolCall>::Agent {
            turn: 1,
            event: AgentEvent::Done {
                reason: StopReason::MaxNewTokens { limit: 8 },
            },
        }))
        .unwrap();
        assert_eq!(
            done["body"],
            serde_json::json!({"agent": {"turn": 1, "event":
                {"done": {"reason": {"max_new_tokens": {"limit": 8}}}}}})
        );
        let failed = serde_json::to_value(WorkerMessage::<ToolCall>::Agent {
            turn: 1,
            event: AgentEvent::Error {
                error: AgentError::Backend(gg_agent::BackendError::NotReady {
                    message: "m".into(),
                }),
            },
        })
        .unwrap();
        assert_eq!(
            failed["agent"]["event"],
            serde_json::json!({"error": {"error": {"backend": {"not_ready": {"message": "m"}}}}})
        );
    }
}
