//! UI-facing data types. Plain serde data so the extension's contexts and the demo widget can send
//! them to the UI as they are (tagged enums, `snake_case`).

use serde::{Deserialize, Serialize};

/// Identifies a message in one conversation. Assigned by [`crate::ChatState`].
pub type MessageId = u64;

/// Who wrote a message: the agent's [`Role`](gg_agent::Role). The UI shows the user's messages
/// and the model's answers ([`Role::User`], [`Role::Model`]); it shows nothing for the system
/// prompt and tool responses, which the model's answers carry as their tool steps.
pub use gg_agent::Role;

/// A role's stable name in the UI's markup (`data-role`): `user`, `assistant` (the model),
/// `system`, `tool`.
pub fn role_attr(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Model => "assistant",
        Role::System => "system",
        Role::Tool => "tool",
    }
}

/// One message in the conversation. Assistant messages also carry the model's thinking and the tool
/// calls it made while producing this answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub id: MessageId,
    pub role: Role,
    /// Markdown (assistant) or plain text (user).
    pub text: String,
    /// The model's thinking, if any (thinking mode).
    #[serde(default)]
    pub thinking: String,
    /// Tool calls made during this answer, in order.
    #[serde(default)]
    pub tools: Vec<ToolStep>,
    /// Tokens are still arriving.
    #[serde(default)]
    pub streaming: bool,
    /// The user stopped the answer before it finished.
    #[serde(default)]
    pub stopped: bool,
    /// Images the user attached (user messages), shown above the text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImagePart>,
}

impl ChatMessage {
    pub fn user(id: MessageId, text: impl Into<String>) -> Self {
        Self {
            id,
            role: Role::User,
            text: text.into(),
            thinking: String::new(),
            tools: Vec::new(),
            streaming: false,
            stopped: false,
            images: Vec::new(),
        }
    }

    /// A user message with attached images.
    pub fn user_with_images(
        id: MessageId,
        text: impl Into<String>,
        images: Vec<ImagePart>,
    ) -> Self {
        Self {
            images,
            ..Self::user(id, text)
        }
    }

    pub fn assistant(id: MessageId, text: impl Into<String>) -> Self {
        Self {
            role: Role::Model,
            ..Self::user(id, text)
        }
    }
}

/// Where a tool call stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolState {
    Pending,
    AwaitingApproval,
    Running,
    Done,
    Failed,
}

impl ToolState {
    /// Stable name, used as `data-state`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Running => "running",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }

    /// Human label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::AwaitingApproval => "Needs your approval",
            Self::Running => "Running",
            Self::Done => "Done",
            Self::Failed => "Failed",
        }
    }

    /// The call has finished (successfully or not).
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Done | Self::Failed)
    }
}

/// One tool call, as shown in the [`crate::ToolTimeline`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolStep {
    /// The call id from the agent loop; approvals refer to it.
    pub id: String,
    /// Tool name, e.g. `click_element`.
    pub tool: String,
    /// Arguments as the model gave them.
    #[serde(default)]
    pub args: serde_json::Value,
    pub state: ToolState,
    /// Wall time of the call in milliseconds, once known.
    #[serde(default)]
    pub duration_ms: Option<f64>,
    /// A short preview of the result (or the error message when failed).
    #[serde(default)]
    pub result_preview: Option<String>,
    /// A screenshot as a `data:image/...` URL; anything else is ignored.
    #[serde(default)]
    pub screenshot: Option<String>,
    /// Why this call needs approval (shown while awaiting approval).
    #[serde(default)]
    pub approval_reason: Option<String>,
    /// The approval card offers no "always on this site" (run_javascript: at most for the task).
    #[serde(default)]
    pub approval_no_always: bool,
    /// The approval card offers "for this task".
    #[serde(default)]
    pub approval_for_task: bool,
    /// Code the call would run, shown in full on the approval card.
    #[serde(default)]
    pub approval_code: Option<String>,
}

impl ToolStep {
    pub fn new(id: impl Into<String>, tool: impl Into<String>, args: serde_json::Value) -> Self {
        Self {
            id: id.into(),
            tool: tool.into(),
            args,
            state: ToolState::Pending,
            duration_ms: None,
            result_preview: None,
            screenshot: None,
            approval_reason: None,
            approval_no_always: false,
            approval_for_task: false,
            approval_code: None,
        }
    }

    /// The screenshot URL if it is a safe inline image.
    pub fn safe_screenshot(&self) -> Option<&str> {
        self.screenshot.as_deref().filter(|s| {
            s.starts_with("data:image/png;")
                || s.starts_with("data:image/jpeg;")
                || s.starts_with("data:image/webp;")
        })
    }
}

/// The user's answer to an approval request: the agent's own type (the UI sends it on as it is).
pub use gg_agent::ApprovalDecision;

/// An image attached to a message (media type + encoded bytes): the agent's own type.
pub use gg_agent::ImagePart;

/// The two Gemma 4 models the UI offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelChoice {
    #[default]
    E2b,
    E4b,
}

impl ModelChoice {
    pub const ALL: [ModelChoice; 2] = [ModelChoice::E2b, ModelChoice::E4b];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::E2b => "e2b",
            Self::E4b => "e4b",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::E2b => "Gemma 4 E2B",
            Self::E4b => "Gemma 4 E4B",
        }
    }
}

/// What the settings panel knows about one model's files.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    pub model: ModelChoice,
    /// Total download size in bytes.
    pub download_bytes: u64,
    /// Bytes already in the cache; `None` when nothing is cached.
    #[serde(default)]
    pub cached_bytes: Option<u64>,
}

impl ModelInfo {
    /// All files are in the cache.
    pub fn is_cached(&self) -> bool {
        self.cached_bytes.is_some_and(|c| c >= self.download_bytes)
    }
}

/// Where model files come from.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", content = "url", rename_all = "snake_case")]
pub enum ModelSource {
    #[default]
    HuggingFace,
    /// A mirror with the Hugging Face layout, e.g. `https://mirror.example/models`.
    Mirror(String),
}

/// A per-site permission the user granted ("always on this site") or refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SitePermission {
    /// The site's origin, e.g. `https://example.com`.
    pub site: String,
    /// The tool or action, e.g. `run_javascript`.
    pub tool: String,
    pub allowed: bool,
}

/// The user's settings. The host persists them; the UI edits them and emits the new value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub model: ModelChoice,
    pub thinking: bool,
    pub max_iterations: u32,
    pub temperature: f32,
    #[serde(default)]
    pub disabled_sites: Vec<String>,
    #[serde(default)]
    pub site_permissions: Vec<SitePermission>,
    #[serde(default)]
    pub model_source: ModelSource,
    /// The plain `http://` mirror (to another machine) the user confirmed, if any: such a mirror
    /// is used only once confirmed (`http://localhost` and `http://127.0.0.1` need no
    /// confirmation).
    #[serde(default)]
    pub confirmed_http_mirror: Option<String>,
    /// Soft tokens each image becomes for the model (one of [`Settings::IMAGE_TOKENS`]).
    #[serde(default = "default_image_tokens")]
    pub image_tokens: u32,
    /// Sample tool calls under the declared tools' grammar (constrained decoding), so that
    /// every call is well formed with valid arguments.
    #[serde(default = "default_constrain_tool_calls")]
    pub constrain_tool_calls: bool,
}

fn default_image_tokens() -> u32 {
    gg_agent::DEFAULT_IMAGE_TOKENS
}

fn default_constrain_tool_calls() -> bool {
    true
}

impl Settings {
    pub const MAX_ITERATIONS_RANGE: (u32, u32) = (1, 50);
    pub const TEMPERATURE_RANGE: (f32, f32) = (0.0, 2.0);
    /// The image budgets offered (Gemma 4's supported `max_soft_tokens`).
    pub const IMAGE_TOKENS: [u32; 5] = gg_agent::IMAGE_TOKEN_BUDGETS;
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            model: ModelChoice::E2b,
            thinking: false,
            max_iterations: 10,
            temperature: 1.0,
            disabled_sites: Vec::new(),
            site_permissions: Vec::new(),
            model_source: ModelSource::HuggingFace,
            confirmed_http_mirror: None,
            image_tokens: gg_agent::DEFAULT_IMAGE_TOKENS,
            constrain_tool_calls: true,
        }
    }
}

/// Where the model stands.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelStatus {
    /// Nothing loaded yet; the first message starts loading.
    #[default]
    NotLoaded,
    /// Files are downloading.
    Downloading {
        model: ModelChoice,
        loaded_bytes: u64,
        total_bytes: u64,
        /// Recent throughput, for the ETA.
        #[serde(default)]
        bytes_per_second: Option<f64>,
    },
    /// Files are local; weights are going to the GPU / shaders compile.
    Initializing { model: ModelChoice },
    Ready {
        model: ModelChoice,
        /// Files the repository published no SHA-256 for: checked by size only.
        #[serde(default)]
        unverified: Vec<String>,
    },
}

impl ModelStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NotLoaded => "not_loaded",
            Self::Downloading { .. } => "downloading",
            Self::Initializing { .. } => "initializing",
            Self::Ready { .. } => "ready",
        }
    }

    /// The model cannot take a message right now.
    pub fn is_loading(&self) -> bool {
        matches!(self, Self::Downloading { .. } | Self::Initializing { .. })
    }

    /// Download progress in 0..=1, if downloading.
    pub fn progress(&self) -> Option<f64> {
        match *self {
            Self::Downloading {
                loaded_bytes,
                total_bytes,
                ..
            } if total_bytes > 0 => {
                Some((loaded_bytes as f64 / total_bytes as f64).clamp(0.0, 1.0))
            }
            Self::Downloading { .. } => Some(0.0),
            _ => None,
        }
    }

    /// Seconds left, if the throughput is known.
    pub fn eta_seconds(&self) -> Option<f64> {
        match *self {
            Self::Downloading {
                loaded_bytes,
                total_bytes,
                bytes_per_second: Some(bps),
                ..
            } if bps > 0.0 => Some(total_bytes.saturating_sub(loaded_bytes) as f64 / bps),
            _ => None,
        }
    }
}

/// The kinds of error the UI knows how to explain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// No WebGPU adapter (old browser, GPU blocklisted, hardware acceleration off).
    #[serde(rename = "webgpu_unavailable")]
    WebGpuUnavailable,
    /// A model file failed to download.
    DownloadFailed,
    /// Not enough GPU memory / storage quota for this model.
    OutOfMemory,
    /// The model files could not be loaded (corrupt cache, unsupported op...).
    ModelLoadFailed,
    /// Generation failed mid-answer.
    GenerationFailed,
    /// The extension was reloaded or updated; this page's UI is orphaned.
    ContextInvalidated,
    /// Gemma Gem is disabled on this site.
    SiteDisabled,
    /// A change (settings, a permission, a disabled site) could not be stored.
    SaveFailed,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 8] = [
        ErrorKind::WebGpuUnavailable,
        ErrorKind::DownloadFailed,
        ErrorKind::OutOfMemory,
        ErrorKind::ModelLoadFailed,
        ErrorKind::GenerationFailed,
        ErrorKind::ContextInvalidated,
        ErrorKind::SiteDisabled,
        ErrorKind::SaveFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::WebGpuUnavailable => "webgpu_unavailable",
            Self::DownloadFailed => "download_failed",
            Self::OutOfMemory => "out_of_memory",
            Self::ModelLoadFailed => "model_load_failed",
            Self::GenerationFailed => "generation_failed",
            Self::ContextInvalidated => "context_invalidated",
            Self::SiteDisabled => "site_disabled",
            Self::SaveFailed => "save_failed",
        }
    }

    /// Headline shown in the banner.
    pub fn title(self) -> &'static str {
        match self {
            Self::WebGpuUnavailable => "WebGPU is not available",
            Self::DownloadFailed => "The model download failed",
            Self::OutOfMemory => "Not enough memory for this model",
            Self::ModelLoadFailed => "The model could not be loaded",
            Self::GenerationFailed => "The answer was interrupted",
            Self::ContextInvalidated => "Gemma Gem was updated",
            Self::SiteDisabled => "Gemma Gem is off on this site",
            Self::SaveFailed => "Your change was not saved",
        }
    }

    /// What the user can do about it.
    pub fn advice(self) -> &'static str {
        match self {
            Self::WebGpuUnavailable => {
                "Use a recent Chrome (113 or newer), turn on \"Use graphics acceleration when available\" in chrome://settings/system, and check chrome://gpu that WebGPU is enabled."
            }
            Self::DownloadFailed => {
                "Check your connection and retry; the download resumes where it stopped. A mirror can be set in Settings."
            }
            Self::OutOfMemory => {
                "Close other GPU-heavy tabs, or switch to the smaller E2B model in Settings."
            }
            Self::ModelLoadFailed => {
                "Clear the downloaded model in Settings and download it again."
            }
            Self::GenerationFailed => "Retry the last message, or start a new chat.",
            Self::ContextInvalidated => "Reload this page to use the new version.",
            Self::SiteDisabled => "Turn it back on for this site in Settings.",
            Self::SaveFailed => {
                "The setting is as it was before. Try again in Settings; if it keeps failing, Chrome's storage for extensions may be full."
            }
        }
    }

    /// The actions the banner offers (Dismiss is always offered as well, except where noted).
    pub fn actions(self) -> &'static [ErrorAction] {
        match self {
            Self::WebGpuUnavailable => &[ErrorAction::WebGpuHelp, ErrorAction::Retry],
            Self::DownloadFailed => &[ErrorAction::Retry, ErrorAction::OpenSettings],
            Self::OutOfMemory => &[ErrorAction::OpenSettings, ErrorAction::Retry],
            Self::ModelLoadFailed => &[ErrorAction::OpenSettings, ErrorAction::Retry],
            Self::GenerationFailed => &[ErrorAction::Retry],
            Self::ContextInvalidated => &[ErrorAction::ReloadPage],
            Self::SiteDisabled => &[ErrorAction::OpenSettings],
            Self::SaveFailed => &[ErrorAction::OpenSettings],
        }
    }
}

/// A button on an error banner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorAction {
    Retry,
    OpenSettings,
    /// Show how to enable WebGPU (the host opens a help page).
    #[serde(rename = "webgpu_help")]
    WebGpuHelp,
    ReloadPage,
    Dismiss,
}

impl ErrorAction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::OpenSettings => "open_settings",
            Self::WebGpuHelp => "webgpu_help",
            Self::ReloadPage => "reload_page",
            Self::Dismiss => "dismiss",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Retry => "Retry",
            Self::OpenSettings => "Open settings",
            Self::WebGpuHelp => "How to enable WebGPU",
            Self::ReloadPage => "Reload page",
            Self::Dismiss => "Dismiss",
        }
    }
}

/// An error shown as a banner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UiError {
    pub kind: ErrorKind,
    /// The technical detail (shown small, under the advice).
    #[serde(default)]
    pub detail: String,
}

impl UiError {
    pub fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
        }
    }
}

/// A screen corner, where the launcher sits (shared with the content script's launcher; its
/// serde form and `data-corner` are [`Corner::snake_name`]).
pub use gg_vocab::Corner;

/// Colour theme. `Auto` follows `prefers-color-scheme`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Theme {
    #[default]
    Auto,
    Light,
    Dark,
}

impl Theme {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Light => "light",
            Self::Dark => "dark",
        }
    }
}

/// What the user asked for, as the UI reports it to its host ([`crate::GemApp`]'s `on_intent`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum UiIntent {
    /// Send a message (the UI has already appended it): its text and the images attached to it.
    Send {
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<ImagePart>,
    },
    /// Stop the current answer.
    Stop,
    /// Forget the conversation.
    NewChat,
    /// Answer an approval request for tool call `call_id`.
    Approve {
        call_id: String,
        decision: ApprovalDecision,
    },
    /// The settings changed (the whole new value).
    SettingsChanged { settings: Settings },
    /// Delete the downloaded files of a model.
    ClearModel { model: ModelChoice },
    /// Disable Gemma Gem on the current site.
    DisableSite { site: String },
    /// An error banner's action (Dismiss is handled by the UI and reported too).
    ErrorAction {
        kind: ErrorKind,
        action: ErrorAction,
    },
    /// The launcher was moved.
    MoveLauncher { corner: Corner },
    /// The panel was opened or closed.
    PanelToggled { open: bool },
}
