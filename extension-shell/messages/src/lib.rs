//! Typed messages shared by every extension context.
//!
//! Every message travels as an [`Envelope`]: a protocol tag, a request id, the context it comes
//! from and a body tagged by `type`. Each channel has its own request enum and the enum of the
//! answers to it; a receiver parses the enum of the channel that the Chrome-supplied sender
//! (see [`SenderInfo`]) speaks on, so a message of another channel is refused at parsing. The
//! variants keep the `type` tags and field names of the single `Body` enum of earlier versions:
//! the JSON on the wire is the same.
//!
//! | channel                          | request              | answer              |
//! |----------------------------------|----------------------|---------------------|
//! | overlay -> service worker        | [`OverlayRequest`]   | [`OverlayAnswer`]   |
//! | content script -> service worker | [`ContentRequest`]   | [`ContentAnswer`]   |
//! | offscreen -> service worker      | [`OffscreenRequest`] | [`OffscreenAnswer`] |
//! | service worker -> offscreen      | [`OffscreenCommand`] | [`OffscreenReply`]  |
//! | service worker -> content script | [`ContentCommand`]   | [`ContentReply`]    |
//! | offscreen -> every context       | [`Broadcast`]        | [`OffscreenAnswer`] (the service worker's `Ack`) |

use serde::{Deserialize, Serialize};

pub mod storage;
pub mod widget;
#[cfg(test)]
mod wire_tests;

/// Prefix of every log line the extension writes.
pub const LOG_PREFIX: &str = "[Gemma Gem]";

/// Protocol tag carried by every envelope, so foreign messages are told apart at once.
pub const PROTOCOL: &str = "gemma-gem/1";

/// Storage key (in `chrome.storage.session`) of the offscreen document's latest report.
pub const OFFSCREEN_STATUS_KEY: &str = "offscreenStatus";

/// Key of the settings in `chrome.storage.sync`.
pub const SETTINGS_KEY: &str = "settings";

/// Default model source: the onnx-community export on Hugging Face at a pinned revision.
pub const DEFAULT_MODEL_SOURCE: &str = "https://huggingface.co/onnx-community/gemma-4-E2B-it-ONNX/resolve/9f4bef82ea6e296bc69f8a2f5939f73af81b07a6";

/// Default source of the E4B model: the onnx-community export on Hugging Face. No revision has been
/// pinned for it yet, so it follows `main`.
pub const DEFAULT_E4B_MODEL_SOURCE: &str =
    "https://huggingface.co/onnx-community/gemma-4-E4B-it-ONNX/resolve/main";

/// The model repository for a `modelSource` and `modelSize` setting: the default source follows
/// the size (E2B or E4B on Hugging Face); any other source is a repository (a mirror in the Hugging
/// Face layout) used as it is.
pub fn model_repository(model_source: &str, model_size: &str) -> String {
    let source = model_source.trim();
    if source.is_empty() || source == DEFAULT_MODEL_SOURCE {
        if model_size.eq_ignore_ascii_case("E4B") {
            DEFAULT_E4B_MODEL_SOURCE.to_owned()
        } else {
            DEFAULT_MODEL_SOURCE.to_owned()
        }
    } else {
        source.trim_end_matches('/').to_owned()
    }
}

/// The user's settings, stored in `chrome.storage.sync` under [`SETTINGS_KEY`] and written by the
/// service worker only. Missing fields take their defaults, so older stored values keep working.
/// Per-site data (disabled hosts, permissions) lives in `chrome.storage.local`, one key per site
/// ([`storage`]); older items that still hold it are migrated ([`storage::migrate`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Settings {
    /// `"E2B"` or `"E4B"`.
    pub model_size: String,
    pub thinking: bool,
    pub max_iterations: u32,
    pub temperature: f32,
    /// A base URL in the Hugging Face layout (default: Hugging Face at the pinned revision). In
    /// development builds, `script:URL` replays scripted model output (for tests).
    pub model_source: String,
    /// The plain `http://` model source the user confirmed in the settings (its files could be
    /// changed on the way); any other `http://` source to another machine is refused
    /// ([`storage::check_model_source`]).
    pub confirmed_http_mirror: String,
    /// Soft tokens per image the model sees (screenshots, pasted images): one of
    /// [`gg_agent::IMAGE_TOKEN_BUDGETS`].
    pub image_tokens: u32,
    /// Sample tool calls under the declared tools' grammar
    /// ([`gg_agent::GenerateOptions::constrain_tool_calls`]).
    pub constrain_tool_calls: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            model_size: "E2B".into(),
            thinking: false,
            max_iterations: 10,
            temperature: 1.0,
            model_source: DEFAULT_MODEL_SOURCE.into(),
            confirmed_http_mirror: String::new(),
            image_tokens: gg_agent::DEFAULT_IMAGE_TOKENS,
            constrain_tool_calls: true,
        }
    }
}

/// Storage key (in `chrome.storage.session`) of the conversation a tab had with the pages of
/// one origin: `conversation:TAB:ORIGIN`. A tab keeps one conversation per origin; nothing read
/// on one origin is in the context of another.
pub fn conversation_key(tab_id: i64, origin: &str) -> String {
    format!("conversation:{tab_id}:{origin}")
}

/// The prefix of every conversation key of a tab (to free them when the tab closes).
pub fn conversation_prefix(tab_id: i64) -> String {
    format!("conversation:{tab_id}:")
}

/// `chrome.storage.session` key of the unused overlay token issued for a tab.
pub fn overlay_token_key(tab_id: i64) -> String {
    format!("overlayToken:{tab_id}")
}

/// `chrome.storage.session` key of the overlay a tab's token activated (its `documentId`).
pub fn overlay_key(tab_id: i64) -> String {
    format!("overlay:{tab_id}")
}

/// Identifies one request and every item streamed in answer to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RequestId(pub u64);

/// The extension context a message comes from or goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Context {
    ServiceWorker,
    Offscreen,
    Overlay,
    Content,
}

/// What the offscreen document learned about WebGPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdapterReport {
    /// `navigator.gpu` exists.
    pub webgpu_available: bool,
    /// Adapter description (vendor, architecture, device), when an adapter was found.
    pub adapter: Option<AdapterSummary>,
    /// What went wrong, phrased for the user, when no adapter could be used.
    pub error: Option<String>,
}

/// The parts of a WebGPU adapter that matter to us.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdapterSummary {
    pub vendor: String,
    pub architecture: String,
    pub device: String,
    pub description: String,
    pub shader_f16: bool,
    pub max_storage_buffer_binding_size: u64,
    pub max_buffer_size: u64,
}

/// Overlay -> service worker. The tab is always the one Chrome says the message came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OverlayRequest {
    /// The overlay's first message: the token its content script put in its URL. Until it is
    /// accepted the service worker answers nothing else of that overlay.
    ActivateOverlay { token: String },
    /// The user sent a message in this tab's overlay: its text and the images attached to it
    /// (checked by the service worker: [`gg_agent::ImagePart::check_user_images`]).
    ChatSend {
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<gg_agent::ImagePart>,
    },
    /// Stop this tab's answer.
    ChatStop,
    /// Forget this tab's conversation.
    ChatNew,
    /// The user's answer to an approval request.
    ChatApproval {
        call_id: u64,
        /// The nonce of the request ([`gg_agent::ApprovalRequest::nonce`]); answers for any
        /// other nonce are ignored.
        nonce: String,
        decision: gg_agent::ApprovalDecision,
    },
    /// Which tab am I in, and what has been said here so far? Answered with
    /// [`OverlayAnswer::Conversation`].
    GetConversation,
    /// The site (origin) of the page this overlay is shown in ([`OverlayAnswer::Site`]).
    GetPageSite,
    /// Store the user's settings (`chrome.storage.sync`). The service worker checks them (ranges;
    /// a plain `http://` model source needs its confirmation) and is the only writer.
    SaveSettings { settings: Settings },
    /// Turn Gemma Gem off (or back on) on the host of `site` (`chrome.storage.local`,
    /// [`storage::disabled_key`]).
    SetSiteDisabled { site: String, disabled: bool },
    /// The user answered "always on this site" in this tab. Stored for the origin the tab shows
    /// only, and only a permission that may persist.
    GrantSitePermission {
        site: String,
        permission: gg_agent::Permission,
    },
    /// Withdraw a permission stored for `site`.
    RevokeSitePermission {
        site: String,
        permission: gg_agent::Permission,
    },
    /// Hide this tab's panel and give the focus back to the page (Escape or the close button
    /// inside the overlay, whose key events the page never sees).
    ClosePanel,
    /// Where the model stands (a newly opened overlay); forwarded to the offscreen document.
    GetModelStatus,
    /// What Cache Storage holds of these model repositories (base URLs, see
    /// [`model_repository`]); forwarded to the offscreen document.
    GetStoredModels { repositories: Vec<String> },
    /// Delete every stored file of `repository` (forwarded to the offscreen document, which
    /// refuses while that repository is downloading or loading).
    ClearModel { repository: String },
    /// The extension's status ([`OverlayAnswer::Status`]).
    GetStatus,
}

/// Service worker -> overlay: the answers to [`OverlayRequest`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OverlayAnswer {
    Ack,
    /// The request failed; `message` says why (shown to the user).
    Error {
        message: String,
    },
    Status(StatusReport),
    Conversation(ConversationView),
    Site {
        site: String,
    },
    ModelStatus(ModelReport),
    StoredModels {
        models: Vec<StoredModel>,
    },
}

/// Content script -> service worker. The content script (no_std, no serde) writes these by hand.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentRequest {
    /// A one-time token for the overlay iframe this content script is about to create (the tab
    /// and the sender's `documentId` are Chrome's). Answered with [`ContentAnswer::OverlayToken`].
    OverlayTokenRequest,
    /// The in-page code failed (a panic traps it) and its loader restarted it; logged by the
    /// service worker. `detail`: the panic message.
    ContentCrashed { detail: String },
    /// The extension's status.
    GetStatus,
}

/// Service worker -> content script: the answers to [`ContentRequest`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentAnswer {
    Ack,
    Error {
        message: String,
    },
    Status(StatusReport),
    /// 128 random bits as hex, valid once, for this tab and document only.
    OverlayToken {
        token: String,
    },
}

/// Offscreen -> service worker: the requests of the offscreen document (its broadcasts are
/// [`Broadcast`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OffscreenRequest {
    /// The document has loaded its wasm and is ready.
    OffscreenReady,
    /// The result of probing WebGPU.
    AdapterReport(AdapterReport),
    /// Run a page tool in a tab (forwarded to its content script, or run by the service worker
    /// itself for screenshots and scripting). Answered with [`OffscreenAnswer::ToolOutcome`].
    TabToolCall {
        tab_id: i64,
        /// The document the turn is bound to ([`PageBinding::document_id`]); the call goes to it
        /// only, and fails when the tab no longer shows it.
        document_id: String,
        call_id: String,
        call: gg_agent::ToolCall,
    },
    /// Element facts from a tab, for the safety gate ([`OffscreenAnswer::ElementFacts`]).
    TabElementFacts {
        tab_id: i64,
        document_id: String,
        target: gg_agent::ElementTarget,
    },
    /// The site (origin) a tab shows, when it still shows `document_id` (an error otherwise).
    TabSite { tab_id: i64, document_id: String },
    /// A tab's conversation after a turn, to persist.
    ConversationSnapshot {
        tab_id: i64,
        /// The origin the conversation belongs to.
        #[serde(default)]
        origin: String,
        messages: Vec<gg_agent::ChatMessage>,
    },
    /// The extension's status.
    GetStatus,
}

/// Service worker -> offscreen: the answers to [`OffscreenRequest`] (and to a [`Broadcast`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OffscreenAnswer {
    Ack,
    Error {
        message: String,
    },
    Status(StatusReport),
    /// On the wire the result is `{"Ok": {"value": ..., "images": [...]}}` or
    /// `{"Err": {"kind": "stale_ref", "message": ...}}`.
    ToolOutcome {
        call_id: String,
        result: Result<gg_agent::ToolOutput, gg_agent::ToolError>,
    },
    ElementFacts {
        result: Result<gg_agent::ElementFacts, gg_agent::ToolError>,
    },
    Site {
        site: String,
    },
}

/// Service worker -> offscreen document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OffscreenCommand {
    /// Liveness check ([`OffscreenReply::Pong`]).
    Ping,
    /// Run one agent turn for a tab.
    RunTurn {
        tab_id: i64,
        text: String,
        /// Images the user attached (checked by the service worker).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<gg_agent::ImagePart>,
        /// Soft tokens per image (settings `imageTokens`).
        #[serde(default = "default_image_tokens")]
        image_tokens: u32,
        /// Constrained tool calls (settings `constrainToolCalls`; missing: on).
        #[serde(default = "default_constrain")]
        constrain_tool_calls: bool,
        model_source: String,
        /// `"E2B"` or `"E4B"` (picks the default repository; see [`model_repository`]).
        #[serde(default)]
        model_size: String,
        max_iterations: u32,
        thinking: bool,
        /// Sampling temperature (settings `temperature`).
        #[serde(default = "default_temperature")]
        temperature: f32,
        /// What the user allowed "always on this site" (settings `sitePermissions`, the JSON of
        /// `gg_agent::SitePermissions`).
        #[serde(default)]
        site_permissions: serde_json::Value,
        /// The page the turn is bound to: the tab's top document when the user sent the message.
        /// Every tool call of the turn goes to this document only, and the turn stops when the
        /// tab shows another one.
        #[serde(default)]
        binding: PageBinding,
    },
    /// The top frame of a tab committed a navigation (`webNavigation.onCommitted`, frame 0: a
    /// new document) or changed its URL in place (`onHistoryStateUpdated`, `same_document`). A
    /// running turn bound to another document, or to another origin, is stopped.
    PageChanged {
        tab_id: i64,
        document_id: String,
        url: String,
        same_document: bool,
    },
    /// The tab was closed; stop its turn and forget everything of it.
    ForgetTab { tab_id: i64 },
    /// Cancel a tab's running turn.
    CancelTurn { tab_id: i64 },
    /// An approval answer for a tab's pending call.
    ApprovalAnswer {
        tab_id: i64,
        call_id: u64,
        nonce: String,
        decision: gg_agent::ApprovalDecision,
    },
    /// Forget a tab's conversation with `origin`.
    ClearConversation {
        tab_id: i64,
        #[serde(default)]
        origin: String,
    },
    /// A tab's conversation, restored from storage when the offscreen document does not have it
    /// (after it was recreated).
    RestoreConversation {
        tab_id: i64,
        #[serde(default)]
        origin: String,
        messages: Vec<gg_agent::ChatMessage>,
    },
    /// A tab's conversation with `origin` ([`OffscreenReply::Conversation`]).
    GetTabConversation {
        tab_id: i64,
        #[serde(default)]
        origin: String,
    },
    /// Where the model stands ([`OffscreenReply::ModelStatus`]).
    GetModelStatus,
    /// What Cache Storage holds of these model repositories ([`OffscreenReply::StoredModels`]).
    GetStoredModels { repositories: Vec<String> },
    /// Delete every stored file of `repository`. Refused while that repository is downloading or
    /// loading; a loaded model stays loaded. Answered with [`OffscreenReply::StoredModels`] for
    /// that repository (now empty).
    ClearModel { repository: String },
    /// Answered by development builds only (`gg-offscreen/dev-probe`; the large end-to-end test
    /// sends it from the service worker): the model of `model_source` (and `model_size`), loaded
    /// as a turn loads it — downloaded into Cache Storage and streamed onto the GPU, or the load
    /// in progress joined, or the model already loaded — generates `max_new_tokens` greedy tokens
    /// after `input_ids` (no chat template, no end ids), queued behind any running turn. Answered
    /// with [`OffscreenReply::DevGreedyResult`].
    DevGreedy {
        model_source: String,
        #[serde(default)]
        model_size: String,
        input_ids: Vec<u32>,
        max_new_tokens: u32,
    },
}

/// Offscreen -> service worker: the answers to [`OffscreenCommand`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OffscreenReply {
    Pong,
    Ack,
    Error {
        message: String,
    },
    Conversation(ConversationView),
    ModelStatus(ModelReport),
    /// What is stored, one entry per repository asked about.
    StoredModels {
        models: Vec<StoredModel>,
    },
    DevGreedyResult(DevGreedyResult),
}

/// Service worker -> content script of one tab (delivered to one document where it matters).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentCommand {
    /// Run a page tool. The call has already been validated and normalised by the agent
    /// (`gg_agent::BuiltinCall::to_call`). Answered with [`ContentReply::ToolOutcome`].
    ExecuteTool {
        call_id: String,
        call: gg_agent::ToolCall,
    },
    /// Facts about an element for the safety gate (never a value): [`ContentReply::ElementFacts`].
    GetElementFacts { target: gg_agent::ElementTarget },
    /// Open or close the panel (the keyboard command, or [`OverlayRequest::ClosePanel`] from the
    /// tab's overlay). Answered with [`ContentReply::Ack`].
    PanelCommand { action: PanelAction },
}

/// Content script -> service worker: the answers to [`ContentCommand`] (written by hand by the
/// no_std content script).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentReply {
    Ack,
    ToolOutcome {
        call_id: String,
        result: Result<gg_agent::ToolOutput, gg_agent::ToolError>,
    },
    ElementFacts {
        result: Result<gg_agent::ElementFacts, gg_agent::ToolError>,
    },
}

/// Offscreen -> every context (`chrome.runtime.sendMessage` reaches the service worker and every
/// overlay). The service worker answers [`OffscreenAnswer::Ack`]; overlays never answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Broadcast {
    /// An event of a tab's agent turn. Overlays show the events of their own tab; the service
    /// worker stores the conversation when a turn ends (from [`OffscreenRequest::ConversationSnapshot`]).
    AgentEvent {
        tab_id: i64,
        seq: u64,
        event: gg_agent::AgentEvent,
    },
    /// Where the model stands (download progress, loading, ready, failed). Every overlay shows
    /// it; the one whose tab asked also shows a failure as an error.
    ModelStatus(ModelReport),
}

impl Broadcast {
    /// The `type` tags of the broadcasts: an offscreen message with one of these is a
    /// [`Broadcast`], any other an [`OffscreenRequest`].
    pub const TYPES: [&'static str; 2] = ["agent_event", "model_status"];
}

/// A tab's conversation with the origin it shows: the answer to
/// [`OverlayRequest::GetConversation`] and [`OffscreenCommand::GetTabConversation`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConversationView {
    pub tab_id: i64,
    pub messages: Vec<gg_agent::ChatMessage>,
    pub running: bool,
    /// Why the last turn stopped, when the user must be told even in a newly opened overlay
    /// (the page changed mid-turn: the overlay that showed the turn is gone).
    #[serde(default)]
    pub notice: Option<String>,
}

/// The answer to [`OffscreenCommand::DevGreedy`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DevGreedyResult {
    /// The greedy tokens.
    pub tokens: Vec<u32>,
    /// Milliseconds of the prefill step and of the decode steps after it.
    pub prefill_ms: f64,
    pub decode_ms: f64,
    /// The offscreen document's `WebAssembly.Memory` size in bytes after the generation (a wasm
    /// memory never shrinks: its peak so far).
    pub wasm_memory_bytes: u64,
    /// Bytes the runtime wrote into GPU buffers so far (weights and inputs).
    pub gpu_bytes_uploaded: u64,
    /// The loaded variant (`q4`, `q4f16`).
    pub dtype: String,
}

fn default_temperature() -> f32 {
    Settings::default().temperature
}

fn default_image_tokens() -> u32 {
    gg_agent::DEFAULT_IMAGE_TOKENS
}

fn default_constrain() -> bool {
    true
}

/// The page a turn is bound to: one tab's top-level document, as Chrome identifies it
/// (`documentId` of `webNavigation.getFrame`, frame 0), and its origin at the turn's start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageBinding {
    pub document_id: String,
    /// `scheme://host[:port]` of the document's URL.
    pub origin: String,
}

/// What [`ContentCommand::PanelCommand`] asks the content script to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PanelAction {
    /// Open the panel when closed, close it when open.
    Toggle,
    /// Close the panel (nothing happens when it is closed).
    Close,
}

/// What Cache Storage holds of one model repository.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredModel {
    /// The repository (base URL).
    pub repository: String,
    /// Bytes stored (complete files and parts of interrupted downloads).
    pub stored_bytes: u64,
    /// The size of every file the cache knows of, stored or not (`stored_bytes` when no server
    /// has said yet).
    pub total_bytes: u64,
    /// Files with an entry in the cache.
    pub files: u32,
    /// Of those, the ones stored completely (size verified).
    pub complete_files: u32,
}

/// Name of the keyboard command (manifest `commands`) that toggles the panel.
pub const TOGGLE_COMMAND: &str = "toggle-overlay";

/// Where the model stands, broadcast by the offscreen document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelReport {
    /// Increases with every report of one offscreen document; overlays drop older ones. A newly
    /// created offscreen document starts again from 1 with `epoch` changed.
    pub seq: u64,
    /// Identifies one offscreen document's life (a random number chosen when it starts).
    pub epoch: u64,
    /// `"E2B"` or `"E4B"`, as the settings asked.
    pub model_size: String,
    /// The repository the files come from (base URL).
    pub source: String,
    pub state: ModelState,
}

/// The phases of a model load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum ModelState {
    /// Nothing loaded; the next message loads it.
    NotLoaded,
    /// Files are downloading into the cache.
    Downloading(DownloadProgress),
    /// The files are cached; weights are going to the GPU.
    Initializing {
        /// What is being loaded (`embed_tokens_q4.onnx`, ...).
        stage: String,
    },
    /// The model answers.
    Ready {
        /// Weight variant (`q4` or `q4f16`).
        dtype: String,
        /// The WebGPU adapter.
        adapter: String,
        /// Model files the repository published no SHA-256 for (checked by size only).
        #[serde(default)]
        unverified: Vec<String>,
    },
    /// Loading failed, or the GPU was lost.
    Failed {
        /// The tab whose message started the load (its overlay shows the error); `None` when no
        /// tab asked (the GPU went away between turns).
        tab_id: Option<i64>,
        kind: ModelErrorKind,
        /// What went wrong and what to do, for the user.
        message: String,
    },
}

/// What kind of failure a model load met (the overlay explains each differently).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelErrorKind {
    /// No `navigator.gpu`, no adapter, or limits too small.
    WebgpuUnavailable,
    /// A file could not be downloaded.
    DownloadFailed,
    /// Not enough storage (quota) or GPU memory.
    OutOfSpace,
    /// The files are broken or unsupported.
    LoadFailed,
    /// The GPU device was lost; the model reloads on the next message.
    DeviceLost,
}

/// Download progress, overall and per file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DownloadProgress {
    /// Bytes of every file of the model that are in the cache (downloaded earlier or now).
    pub loaded_bytes: u64,
    /// Bytes of every file of the model.
    pub total_bytes: u64,
    /// 0..=100.
    pub percent: f64,
    /// Recent throughput.
    pub bytes_per_second: Option<f64>,
    /// Seconds left at that throughput.
    pub eta_seconds: Option<f64>,
    pub files: Vec<FileProgress>,
}

/// Download progress of one file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FileProgress {
    /// Repository path (`onnx/decoder_model_merged_q4.onnx_data`).
    pub path: String,
    pub loaded_bytes: u64,
    /// `None` until the server has said.
    pub total_bytes: Option<u64>,
    /// 0..=100, when the size is known.
    pub percent: Option<f64>,
    /// Seconds left for this file at the current throughput (`Some(0.0)` when done).
    pub eta_seconds: Option<f64>,
}

/// What the service worker knows about the extension as a whole.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub offscreen_alive: bool,
    pub adapter: Option<AdapterReport>,
}

/// One message on the wire: `B` is the body enum of its channel (`serde_json::Value` for a
/// message whose channel is not known yet: [`Envelope::parse_body`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope<B> {
    pub protocol: String,
    pub id: RequestId,
    pub from: Context,
    pub body: B,
}

impl<B> Envelope<B> {
    pub fn new(id: RequestId, from: Context, body: B) -> Self {
        Self {
            protocol: PROTOCOL.to_owned(),
            id,
            from,
            body,
        }
    }
}

impl<B: serde::de::DeserializeOwned> Envelope<B> {
    /// Parses a message received from another context. Anything that is not one of ours
    /// (wrong protocol tag, malformed, a body of another channel) is an error, never a panic.
    pub fn from_json(value: serde_json::Value) -> Result<Self, MessageError> {
        let env: Envelope<serde_json::Value> =
            serde_json::from_value(value).map_err(|e| MessageError::Malformed(e.to_string()))?;
        if env.protocol != PROTOCOL {
            return Err(MessageError::WrongProtocol(env.protocol));
        }
        env.parse_body()
    }
}

impl Envelope<serde_json::Value> {
    /// The `type` tag of the body.
    pub fn body_type(&self) -> Option<&str> {
        self.body.get("type").and_then(|t| t.as_str())
    }

    /// The body parsed as the enum of its channel: a body of another channel, or an unknown
    /// one, is [`MessageError::Malformed`].
    pub fn parse_body<B: serde::de::DeserializeOwned>(self) -> Result<Envelope<B>, MessageError> {
        let body = serde_json::from_value(self.body)
            .map_err(|e| MessageError::Malformed(e.to_string()))?;
        Ok(Envelope {
            protocol: self.protocol,
            id: self.id,
            from: self.from,
            body,
        })
    }
}

/// The sender of a `chrome.runtime` message, as Chrome reports it (`MessageSender`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SenderInfo {
    pub id: Option<String>,
    pub url: Option<String>,
    pub origin: Option<String>,
    #[serde(rename = "tab")]
    pub tab: Option<SenderTab>,
    /// 0 for a tab's top frame; absent for extension contexts outside tabs.
    #[serde(rename = "frameId", default)]
    pub frame_id: Option<i64>,
    #[serde(rename = "documentId", default)]
    pub document_id: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SenderTab {
    pub id: Option<i64>,
    pub url: Option<String>,
}

/// Where each extension page lives, relative to the extension's root.
pub const SERVICE_WORKER_PATH: &str = "background.js";
pub const OFFSCREEN_PATH: &str = "offscreen/offscreen.html";
pub const OVERLAY_PATH: &str = "overlay/overlay.html";

impl SenderInfo {
    /// The URL without its query and fragment.
    fn page(&self) -> &str {
        let url = self.url.as_deref().unwrap_or_default();
        url.split(['?', '#']).next().unwrap_or_default()
    }

    /// Checks that the message comes from this extension (`own_id`) and from the very context
    /// it claims:
    /// - service worker: our `background.js`, no tab;
    /// - offscreen document: our `offscreen/offscreen.html`, no tab;
    /// - overlay: our `overlay/overlay.html` in a frame (not the top frame) of a tab;
    /// - content script: the top frame (`frameId` 0) of a tab showing an `http(s)` page.
    ///
    /// A content script's `documentId` is checked against the expected one with
    /// [`SenderInfo::check_document`].
    pub fn check(&self, own_id: &str, claimed: Context) -> Result<(), MessageError> {
        if self.id.as_deref() != Some(own_id) {
            return Err(MessageError::ForeignSender(
                self.id.clone().unwrap_or_default(),
            ));
        }
        let own = |path: &str| self.page() == format!("chrome-extension://{own_id}/{path}");
        let in_tab = self.tab.as_ref().is_some_and(|t| t.id.is_some());
        let ok = match claimed {
            Context::ServiceWorker => own(SERVICE_WORKER_PATH) && self.tab.is_none(),
            Context::Offscreen => own(OFFSCREEN_PATH) && self.tab.is_none(),
            Context::Overlay => own(OVERLAY_PATH) && in_tab && self.frame_id.is_some_and(|f| f > 0),
            Context::Content => {
                let url = self.page();
                in_tab
                    && self.frame_id == Some(0)
                    && (url.starts_with("http://") || url.starts_with("https://"))
            }
        };
        if ok {
            Ok(())
        } else {
            Err(MessageError::WrongContext(
                claimed,
                self.url.clone().unwrap_or_default(),
            ))
        }
    }

    /// For a content script's message: it must come from `expected` (the document a request
    /// was sent to or a turn is bound to).
    pub fn check_document(&self, expected: &str) -> Result<(), MessageError> {
        if !expected.is_empty() && self.document_id.as_deref() == Some(expected) {
            Ok(())
        } else {
            Err(MessageError::WrongContext(
                Context::Content,
                format!(
                    "document {:?}, expected {expected:?}",
                    self.document_id.clone().unwrap_or_default()
                ),
            ))
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum MessageError {
    Malformed(String),
    WrongProtocol(String),
    ForeignSender(String),
    WrongContext(Context, String),
}

impl std::fmt::Display for MessageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Malformed(e) => write!(f, "malformed message: {e}"),
            Self::WrongProtocol(p) => write!(f, "message with unknown protocol tag {p:?}"),
            Self::ForeignSender(id) => write!(
                f,
                "message from another extension or a page (sender id {id:?}) rejected"
            ),
            Self::WrongContext(c, url) => write!(
                f,
                "message claiming to come from {c:?} was sent from {url:?}; rejected"
            ),
        }
    }
}

impl std::error::Error for MessageError {}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "abcdefghijklmnopabcdefghijklmnop";

    #[test]
    fn round_trip_is_tagged() {
        let env = Envelope::new(RequestId(7), Context::ServiceWorker, OffscreenCommand::Ping);
        let json = serde_json::to_value(&env).unwrap();
        assert_eq!(json["body"]["type"], "ping");
        assert_eq!(json["from"], "service_worker");
        assert_eq!(Envelope::from_json(json).unwrap(), env);
    }

    #[test]
    fn panel_command_wire_format_is_what_the_content_script_reads() {
        // gg-content (no_std, no serde) reads `body.type` and `body.action` by hand.
        let env = Envelope::new(
            RequestId(3),
            Context::ServiceWorker,
            ContentCommand::PanelCommand {
                action: PanelAction::Toggle,
            },
        );
        let json = serde_json::to_value(&env).unwrap();
        assert_eq!(
            json["body"],
            serde_json::json!({"type": "panel_command", "action": "toggle"})
        );
        assert_eq!(Envelope::from_json(json).unwrap(), env);
        let close = serde_json::to_value(ContentCommand::PanelCommand {
            action: PanelAction::Close,
        })
        .unwrap();
        assert_eq!(close["action"], "close");
    }

    #[test]
    fn overlay_token_wire_format_is_what_the_content_script_reads() {
        // gg-content writes the request and reads `body.type` and `body.token` by hand.
        let request: Envelope<ContentRequest> = Envelope::from_json(serde_json::json!({
            "protocol": PROTOCOL, "id": 0, "from": "content",
            "body": {"type": "overlay_token_request"}
        }))
        .unwrap();
        assert_eq!(request.body, ContentRequest::OverlayTokenRequest);
        let answer =
            serde_json::to_value(ContentAnswer::OverlayToken { token: "ab".into() }).unwrap();
        assert_eq!(
            answer,
            serde_json::json!({"type": "overlay_token", "token": "ab"})
        );
        let activate =
            serde_json::to_value(OverlayRequest::ActivateOverlay { token: "ab".into() }).unwrap();
        assert_eq!(activate["type"], "activate_overlay");
    }

    #[test]
    fn rejects_other_protocols_and_garbage() {
        let mut json = serde_json::to_value(Envelope::new(
            RequestId(1),
            Context::Overlay,
            OverlayRequest::ChatStop,
        ))
        .unwrap();
        json["protocol"] = "other/1".into();
        assert!(matches!(
            Envelope::<OverlayRequest>::from_json(json),
            Err(MessageError::WrongProtocol(_))
        ));
        assert!(matches!(
            Envelope::<OverlayRequest>::from_json(serde_json::json!({"type": "x"})),
            Err(MessageError::Malformed(_))
        ));
        // Garbage of every shape is an error, never a panic.
        for junk in [
            serde_json::json!(null),
            serde_json::json!(3),
            serde_json::json!("chat_send"),
            serde_json::json!([1, 2]),
            serde_json::json!({"protocol": PROTOCOL, "id": -1, "from": "overlay", "body": {"type": "chat_stop"}}),
            serde_json::json!({"protocol": PROTOCOL, "id": 1, "from": "page", "body": {"type": "chat_stop"}}),
            serde_json::json!({"protocol": PROTOCOL, "id": 1, "from": "overlay", "body": "chat_stop"}),
            serde_json::json!({"protocol": PROTOCOL, "id": 1, "from": "overlay"}),
        ] {
            assert!(
                matches!(
                    Envelope::<OverlayRequest>::from_json(junk.clone()),
                    Err(MessageError::Malformed(_))
                ),
                "{junk}"
            );
        }
    }

    #[test]
    fn tool_messages_have_a_stable_wire_form() {
        let call = gg_agent::ToolCall::new(
            "click_element",
            serde_json::json!({"ref": "e3"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        let env = Envelope::new(
            RequestId(9),
            Context::ServiceWorker,
            ContentCommand::ExecuteTool {
                call_id: "c1".into(),
                call,
            },
        );
        let json = serde_json::to_value(&env).unwrap();
        assert_eq!(
            json["body"],
            serde_json::json!({"type": "execute_tool", "call_id": "c1", "call": {"name": "click_element", "args": {"ref": "e3"}}})
        );
        let answer = serde_json::json!({"protocol": PROTOCOL, "id": 9, "from": "content", "body": {
            "type": "tool_outcome", "call_id": "c1", "result": {"Err": {"kind": "stale_ref", "message": "gone"}}}});
        match Envelope::<ContentReply>::from_json(answer).unwrap().body {
            ContentReply::ToolOutcome { result: Err(e), .. } => {
                assert_eq!(e.kind, gg_agent::ToolErrorKind::StaleRef)
            }
            other => panic!("unexpected {other:?}"),
        }
        let ok = serde_json::json!({"protocol": PROTOCOL, "id": 9, "from": "content", "body": {
            "type": "tool_outcome", "call_id": "c1", "result": {"Ok": {"value": {"clicked": true}}}}});
        assert!(matches!(
            Envelope::<ContentReply>::from_json(ok).unwrap().body,
            ContentReply::ToolOutcome { result: Ok(_), .. }
        ));
    }

    #[test]
    fn model_status_wire_form() {
        let report = ModelReport {
            seq: 3,
            epoch: 9,
            model_size: "E2B".into(),
            source: "http://127.0.0.1:1/models/x".into(),
            state: ModelState::Downloading(DownloadProgress {
                loaded_bytes: 50,
                total_bytes: 200,
                percent: 25.0,
                bytes_per_second: Some(10.0),
                eta_seconds: Some(15.0),
                files: vec![FileProgress {
                    path: "onnx/a.onnx_data".into(),
                    loaded_bytes: 50,
                    total_bytes: Some(100),
                    percent: Some(50.0),
                    eta_seconds: Some(5.0),
                }],
            }),
        };
        let env = Envelope::new(
            RequestId(4),
            Context::Offscreen,
            Broadcast::ModelStatus(report),
        );
        let json = serde_json::to_value(&env).unwrap();
        assert_eq!(json["body"]["type"], "model_status");
        assert_eq!(json["body"]["state"]["phase"], "downloading");
        assert_eq!(json["body"]["state"]["files"][0]["total_bytes"], 100);
        assert_eq!(Envelope::from_json(json).unwrap(), env);
        let failed = serde_json::json!({"protocol": PROTOCOL, "id": 1, "from": "offscreen", "body": {
            "type": "model_status", "seq": 1, "epoch": 2, "model_size": "E2B", "source": "s",
            "state": {"phase": "failed", "tab_id": 5, "kind": "download_failed", "message": "m"}}});
        assert!(matches!(
            Envelope::<Broadcast>::from_json(failed).unwrap().body,
            Broadcast::ModelStatus(ModelReport {
                state: ModelState::Failed {
                    tab_id: Some(5),
                    kind: ModelErrorKind::DownloadFailed,
                    ..
                },
                ..
            })
        ));
    }

    #[test]
    fn repositories_for_size_and_source() {
        assert_eq!(
            model_repository(DEFAULT_MODEL_SOURCE, "E2B"),
            DEFAULT_MODEL_SOURCE
        );
        assert_eq!(model_repository("", "e2b"), DEFAULT_MODEL_SOURCE);
        assert_eq!(
            model_repository(DEFAULT_MODEL_SOURCE, "E4B"),
            DEFAULT_E4B_MODEL_SOURCE
        );
        assert_eq!(
            model_repository(" http://mirror.example/m/ ", "E4B"),
            "http://mirror.example/m"
        );
        // A RunTurn from an older service worker (no size) still parses.
        let old = serde_json::json!({"type": "run_turn", "tab_id": 1, "text": "hi",
            "model_source": "x", "max_iterations": 3, "thinking": false});
        let body: OffscreenCommand = serde_json::from_value(old).unwrap();
        assert!(
            matches!(body, OffscreenCommand::RunTurn { model_size, .. } if model_size.is_empty())
        );
    }

    #[test]
    fn settings_default_and_partial() {
        let s: Settings = serde_json::from_value(
            serde_json::json!({"thinking": true, "disabledHosts": ["a.example"]}),
        )
        .unwrap();
        assert!(s.thinking);
        assert_eq!(s.max_iterations, 10);
        assert_eq!(s.model_size, "E2B");
        let json = serde_json::to_value(Settings::default()).unwrap();
        assert_eq!(json["modelSize"], "E2B");
        assert_eq!(json["maxIterations"], 10);
        // Per-site data is not part of the synced item any more.
        assert!(json.get("disabledHosts").is_none());
        assert!(json.get("sitePermissions").is_none());
    }

    #[test]
    fn sender_checks() {
        let ext = |path: &str| Some(format!("chrome-extension://{ID}/{path}"));
        let tab = || {
            Some(SenderTab {
                id: Some(3),
                url: Some("https://a.example/".into()),
            })
        };
        let offscreen = SenderInfo {
            id: Some(ID.into()),
            url: ext(OFFSCREEN_PATH),
            ..Default::default()
        };
        let worker = SenderInfo {
            url: ext(SERVICE_WORKER_PATH),
            ..offscreen.clone()
        };
        let overlay = SenderInfo {
            url: ext("overlay/overlay.html?x=1#y"),
            tab: tab(),
            frame_id: Some(7),
            ..offscreen.clone()
        };
        let content = SenderInfo {
            id: Some(ID.into()),
            url: Some("https://a.example/page?q=1".into()),
            tab: tab(),
            frame_id: Some(0),
            document_id: Some("DOC".into()),
            ..Default::default()
        };
        use Context::*;
        // Each context is accepted for what it is, and for nothing else.
        for (sender, context) in [
            (&offscreen, Offscreen),
            (&worker, ServiceWorker),
            (&overlay, Overlay),
            (&content, Content),
        ] {
            for claimed in [Offscreen, ServiceWorker, Overlay, Content] {
                assert_eq!(
                    sender.check(ID, claimed).is_ok(),
                    claimed == context,
                    "{sender:?} claiming {claimed:?}"
                );
            }
        }
        // Another extension, or a page.
        let foreign = SenderInfo {
            id: Some("zzzz".into()),
            ..offscreen.clone()
        };
        assert!(matches!(
            foreign.check(ID, Offscreen),
            Err(MessageError::ForeignSender(_))
        ));
        let rejected =
            |s: SenderInfo, c: Context| assert!(s.check(ID, c).is_err(), "{s:?} as {c:?}");
        // Any other page of the extension is none of them.
        rejected(
            SenderInfo {
                url: ext("offscreen/other.html"),
                ..offscreen.clone()
            },
            Offscreen,
        );
        rejected(
            SenderInfo {
                url: ext("offscreen/offscreen.html.evil"),
                ..offscreen.clone()
            },
            Offscreen,
        );
        rejected(
            SenderInfo {
                url: Some(format!("chrome-extension://{ID}.evil/{OFFSCREEN_PATH}")),
                ..offscreen.clone()
            },
            Offscreen,
        );
        // The offscreen document and the worker have no tab; an extension page in a tab is not them.
        rejected(
            SenderInfo {
                tab: tab(),
                ..offscreen.clone()
            },
            Offscreen,
        );
        rejected(
            SenderInfo {
                tab: tab(),
                ..worker.clone()
            },
            ServiceWorker,
        );
        // The overlay is a frame inside a tab, never a tab of its own.
        rejected(
            SenderInfo {
                frame_id: Some(0),
                ..overlay.clone()
            },
            Overlay,
        );
        rejected(
            SenderInfo {
                tab: None,
                ..overlay.clone()
            },
            Overlay,
        );
        rejected(
            SenderInfo {
                url: ext("overlay/other.html"),
                ..overlay.clone()
            },
            Overlay,
        );
        // Content scripts: the top frame of an http(s) page only.
        rejected(
            SenderInfo {
                frame_id: Some(2),
                ..content.clone()
            },
            Content,
        );
        rejected(
            SenderInfo {
                url: Some("file:///etc/passwd".into()),
                ..content.clone()
            },
            Content,
        );
        rejected(
            SenderInfo {
                url: ext("overlay/overlay.html"),
                ..content.clone()
            },
            Content,
        );
        rejected(
            SenderInfo {
                tab: None,
                ..content.clone()
            },
            Content,
        );
        assert!(content.check_document("DOC").is_ok());
        assert!(content.check_document("OTHER").is_err());
        assert!(
            SenderInfo {
                document_id: None,
                ..content.clone()
            }
            .check_document("")
            .is_err()
        );
        // Chrome's MessageSender as JSON.
        let parsed: SenderInfo = serde_json::from_value(serde_json::json!({
            "id": ID, "url": "https://a.example/", "frameId": 0, "documentId": "D1",
            "tab": {"id": 4, "url": "https://a.example/"}, "origin": "https://a.example"
        }))
        .unwrap();
        assert_eq!(
            (parsed.frame_id, parsed.document_id.as_deref()),
            (Some(0), Some("D1"))
        );
    }
}
