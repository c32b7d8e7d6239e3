//! The embeddable widget's two threads (issue 32): the page's main thread (`gg-widget`: the
//! `<gemma-gem-widget>` element, the UI, the in-page tools) and the dedicated Worker that hosts the
//! model and the agent loop (`gg-widget-worker`). They talk with `postMessage`: [`WidgetRequest`]
//! from the page to the worker as one JSON value per message, [`WorkerMessage`] back as bytes
//! ([`WidgetEnvelope::to_bytes`]: postcard, a compact format without field names, so that the
//! page's main thread links no field-name matching for the many types in them; the JSON values
//! inside travel as JSON text).
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

/// The requests that the page's main thread sends, in [`WidgetRequest`]'s JSON: all of them but
/// the tool answers, which the page posts as the page tools give them. Its own type so that the
/// page links no serializer of tool outputs and element facts it never sends
/// ([`PageRequest::into_request`] is the same request, tested).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PageRequest {
    /// [`WidgetRequest::Load`].
    Load {
        repository: String,
        model_size: String,
    },
    /// [`WidgetRequest::Ask`].
    Ask {
        turn: u64,
        text: String,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        images: Vec<ImagePart>,
        settings: TurnSettings,
    },
    /// [`WidgetRequest::Stop`].
    Stop,
    /// [`WidgetRequest::Clear`].
    Clear,
    /// [`WidgetRequest::Approval`].
    Approval {
        call_id: String,
        decision: ApprovalDecision,
    },
    /// [`WidgetRequest::ParseMarkdown`].
    ParseMarkdown { id: u64, text: String },
}

impl PageRequest {
    /// The [`WidgetRequest`] it is.
    pub fn into_request(self) -> WidgetRequest {
        match self {
            Self::Load {
                repository,
                model_size,
            } => WidgetRequest::Load {
                repository,
                model_size,
            },
            Self::Ask {
                turn,
                text,
                images,
                settings,
            } => WidgetRequest::Ask {
                turn,
                text,
                images,
                settings,
            },
            Self::Stop => WidgetRequest::Stop,
            Self::Clear => WidgetRequest::Clear,
            Self::Approval { call_id, decision } => WidgetRequest::Approval { call_id, decision },
            Self::ParseMarkdown { id, text } => WidgetRequest::ParseMarkdown { id, text },
        }
    }

    /// The message as the page posts it: `{"protocol": ..., "body": {"type": ..., ...}}`.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&WidgetEnvelope {
            protocol: WIDGET_PROTOCOL.to_owned(),
            body: self,
        })
        .unwrap_or_else(|_| "null".into())
    }
}

/// From the worker to the page's main thread. `Call` and `Target` are the typed tool call and
/// element target; the page parses them as JSON values ([`PageMessage`]).
///
/// On the wire as postcard bytes ([`WidgetEnvelope::to_bytes`]). Its serde form is externally
/// tagged (`{"agent": {"turn": 1, "event": {"token": {"text": "Hi"}}}}`), and so are the agent
/// event and the model report inside ([`wire_event`], [`wire_report`]): postcard has no
/// internally tagged enums, and the same form is the JSON that tests read
/// ([`WidgetEnvelope::bytes_to_json`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(
    rename_all = "snake_case",
    bound(
        serialize = "Call: Serialize, Target: Serialize",
        deserialize = "Call: serde::de::DeserializeOwned, Target: serde::de::DeserializeOwned"
    )
)]
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
    RunTool {
        id: u64,
        #[serde(with = "json_text")]
        call: Call,
    },
    /// Describe an element for the safety gate (answered with [`WidgetRequest::ElementFacts`]).
    DescribeElement {
        id: u64,
        #[serde(with = "json_text")]
        target: Target,
    },
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

/// A field carried as JSON text in the binary (not human-readable) form, as itself in JSON: for
/// the values that postcard cannot carry (`serde_json::Value`, which needs a self-describing
/// format; fields skipped when empty; internally tagged enums).
pub mod json_text {
    use serde::de::{DeserializeOwned, Error as _};
    use serde::ser::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            value.serialize(s)
        } else {
            let text = serde_json::to_string(value).map_err(S::Error::custom)?;
            s.serialize_str(&text)
        }
    }

    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        d: D,
    ) -> Result<T, D::Error> {
        if d.is_human_readable() {
            T::deserialize(d)
        } else {
            let text = String::deserialize(d)?;
            serde_json::from_str(&text).map_err(D::Error::custom)
        }
    }
}

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
            call: Call,
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
            output: Output,
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

    /// [`ToolCall`] with its arguments as JSON text in the binary form (the page then parses them
    /// as JSON values, not as a typed call).
    #[derive(Serialize, Deserialize)]
    struct Call {
        name: String,
        #[serde(with = "json_text")]
        args: serde_json::Map<String, serde_json::Value>,
    }

    impl From<ToolCall> for Call {
        fn from(c: ToolCall) -> Self {
            Self {
                name: c.name,
                args: c.args,
            }
        }
    }

    impl From<Call> for ToolCall {
        fn from(c: Call) -> Self {
            Self::new(c.name, c.args)
        }
    }

    /// [`ToolOutput`] with its value as JSON text in the binary form (`images` always written).
    #[derive(Serialize, Deserialize)]
    struct Output {
        #[serde(with = "json_text")]
        value: serde_json::Value,
        #[serde(default)]
        images: Vec<ImagePart>,
    }

    impl From<ToolOutput> for Output {
        fn from(o: ToolOutput) -> Self {
            Self {
                value: o.value,
                images: o.images,
            }
        }
    }

    impl From<Output> for ToolOutput {
        fn from(o: Output) -> Self {
            Self {
                value: o.value,
                images: o.images,
            }
        }
    }

    /// [`ApprovalRequest`] with its reasons externally tagged.
    #[derive(Serialize, Deserialize)]
    struct Approval {
        call_id: u64,
        nonce: String,
        allow_always: bool,
        element: Option<String>,
        site: String,
        call: Call,
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
                call: r.call.into(),
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
                call: r.call.into(),
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
                    call: call.into(),
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
                    output: output.into(),
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
                    call: call.into(),
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
                    output: output.into(),
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

    /// The message as the worker posts it to the page: postcard bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, String> {
        postcard::to_allocvec(self).map_err(|e| format!("could not encode a widget message: {e}"))
    }

    /// Reads [`Self::to_bytes`]'s bytes (all of them); `None` for anything that is not a
    /// message of this protocol.
    pub fn from_bytes(bytes: &[u8]) -> Option<B> {
        let (env, rest): (Self, _) = postcard::take_from_bytes(bytes).ok()?;
        (rest.is_empty() && env.protocol == WIDGET_PROTOCOL).then_some(env.body)
    }
}

impl WidgetEnvelope<WorkerMessage> {
    /// A worker message's bytes as the JSON of its serde form (`{"protocol": ..., "body":
    /// {"agent": {...}}}`), for tests and debugging; an error for bytes that are not one.
    pub fn bytes_to_json(bytes: &[u8]) -> Result<String, String> {
        let env: Self =
            postcard::from_bytes(bytes).map_err(|e| format!("not a widget worker message: {e}"))?;
        serde_json::to_string(&env).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `message` as the worker posts it reads back on the page as the same message, and as the
    /// same JSON as its serde form through [`WidgetEnvelope::bytes_to_json`].
    fn bytes_round_trip(message: WorkerMessage) {
        let env = WidgetEnvelope::new(message.clone());
        let bytes = env.to_bytes().unwrap();
        let json = serde_json::to_value(&env).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(
                &WidgetEnvelope::bytes_to_json(&bytes).unwrap()
            )
            .unwrap(),
            json
        );
        // The page reads the same message, with tool calls and targets as JSON values.
        let page = WidgetEnvelope::<PageMessage>::parse(json).unwrap();
        assert_eq!(
            WidgetEnvelope::<PageMessage>::from_bytes(&bytes),
            Some(page)
        );
        // Bytes cut short, with a byte more, or of another protocol are no message.
        assert_eq!(
            WidgetEnvelope::<PageMessage>::from_bytes(&bytes[..bytes.len() - 1]),
            None
        );
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(WidgetEnvelope::<PageMessage>::from_bytes(&longer), None);
        let other = WidgetEnvelope {
            protocol: "gemma-gem-widget/0".into(),
            body: message,
        };
        assert_eq!(
            WidgetEnvelope::<PageMessage>::from_bytes(&other.to_bytes().unwrap()),
            None
        );
    }

    /// Each request of the page reads, in the worker, as the request it is.
    #[test]
    fn page_requests_are_widget_requests() {
        let settings = TurnSettings {
            repository: "https://h.example/m/".into(),
            model_size: "E4B".into(),
            thinking: true,
            max_iterations: 4,
            temperature: 0.7,
            image_tokens: 560,
            constrain_tool_calls: false,
            system_prompt: Some("be brief".into()),
            tools: vec!["click_element".into()],
        };
        let requests = [
            PageRequest::Load {
                repository: "r".into(),
                model_size: "E2B".into(),
            },
            PageRequest::Ask {
                turn: 2,
                text: "hi".into(),
                images: Vec::new(),
                settings: settings.clone(),
            },
            PageRequest::Ask {
                turn: 3,
                text: "this".into(),
                images: vec![ImagePart::png(vec![137, 80, 78, 71])],
                settings,
            },
            PageRequest::Stop,
            PageRequest::Clear,
            PageRequest::Approval {
                call_id: "4".into(),
                decision: ApprovalDecision::AllowOnce,
            },
            PageRequest::ParseMarkdown {
                id: 9,
                text: "**b**".into(),
            },
        ];
        for request in requests {
            let json: serde_json::Value = serde_json::from_str(&request.to_json()).unwrap();
            assert_eq!(
                WidgetEnvelope::<WidgetRequest>::parse(json),
                Some(request.into_request())
            );
        }
    }

    /// Every kind of worker message goes through postcard (the agent events and model states
    /// are covered by the tests below).
    #[test]
    fn worker_messages_travel_as_bytes() {
        use crate::{AdapterReport, AdapterSummary};
        bytes_round_trip(WorkerMessage::Started {
            adapter: AdapterReport {
                webgpu_available: true,
                adapter: Some(AdapterSummary {
                    vendor: "v".into(),
                    architecture: "a".into(),
                    device: "d".into(),
                    description: "SwiftShader".into(),
                    shader_f16: true,
                    max_storage_buffer_binding_size: 1 << 27,
                    max_buffer_size: 1 << 28,
                }),
                error: None,
            },
        });
        bytes_round_trip(WorkerMessage::Started {
            adapter: AdapterReport {
                webgpu_available: false,
                adapter: None,
                error: Some("no adapter".into()),
            },
        });
        bytes_round_trip(WorkerMessage::RunTool {
            id: 7,
            call: ToolCall::new(
                "type_text",
                serde_json::json!({"ref": "e3", "text": "héllo \"x\"", "n": 1.5, "deep": {"a": [1, null]}})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        });
        bytes_round_trip(WorkerMessage::DescribeElement {
            id: 8,
            target: serde_json::from_value(serde_json::json!({"ref": "e9"})).unwrap(),
        });
        bytes_round_trip(WorkerMessage::Error {
            message: "bad".into(),
        });
        bytes_round_trip(WorkerMessage::Markdown {
            id: 3,
            events: gg_markdown::parse(
                "# T\n\n**b** [l](https://a.example) `c`\n\n| a |\n|---|\n| 1 |\n\n- [x] t\n\n```rs\nx\n```",
            ),
        });
        bytes_round_trip(WorkerMessage::Agent {
            turn: 1,
            event: AgentEvent::PermissionGranted {
                site: "https://a.example".into(),
                permission: Permission::LeaveSiteTo {
                    destination: "https://b.example".into(),
                },
            },
        });
    }

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
                Some(PageMessage::ModelStatus(report.clone()))
            );
            bytes_round_trip(WorkerMessage::ModelStatus(report));
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
            AgentEvent::ToolResult {
                call_id: 3,
                name: "take_screenshot".into(),
                output: ToolOutput {
                    value: serde_json::json!({"width": 2, "ratio": 0.5, "s": "ü"}),
                    images: vec![ImagePart::png(vec![137, 80, 78, 71, 0, 255])],
                },
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
                Some(PageMessage::Agent {
                    turn: 2,
                    event: event.clone()
                })
            );
            bytes_round_trip(WorkerMessage::Agent { turn: 2, event });
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
