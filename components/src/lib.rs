//! Gemma Gem UI components (Yew + stylist). Pure UI: props, callbacks and a reducer; no Chrome API
//! and no runtime dependency.
//!
//! - Data the hosts exchange with the UI: [`types`] (serde).
//! - State: [`ChatState`] + [`Action`] ([`state`]), a `Reducible` unit-tested natively.
//! - Components: [`Launcher`], [`ChatOverlay`], [`ToolTimeline`], [`SettingsPanel`], and the parts
//!   they are made of; [`GemApp`] wires them all to the reducer.
//! - Isolation: [`ShadowHost`] / [`mount_in_shadow`] (closed shadow root, styles inside it);
//!   [`ThemeRoot`] where the host page is already isolated (the extension's overlay iframe).

pub mod app;
pub mod arming;
pub mod attach;
pub mod chat_overlay;
pub mod code_block;
pub mod composer;
pub mod drag_corner;
pub mod error_banner;
pub mod format;
pub mod launcher;
pub mod markdown;
pub mod message;
pub mod mock;
pub mod model_status;
pub mod settings_panel;
pub mod shadow_host;
pub mod state;
pub mod style;
pub mod tool_timeline;
pub mod types;

pub use app::{ChatDispatcher, GemApp, GemAppProps};
pub use chat_overlay::{ChatOverlay, ChatOverlayProps};
pub use code_block::{CodeBlock, CodeBlockProps};
pub use composer::{Composer, ComposerProps, Outgoing};
pub use error_banner::{ErrorBanner, ErrorBannerProps};
pub use launcher::{Launcher, LauncherProps, LauncherStatus};
pub use markdown::{Markdown, MarkdownParser, MarkdownProps};
pub use message::{MessageView, MessageViewProps};
pub use model_status::{ModelStatusView, ModelStatusViewProps};
pub use settings_panel::{SettingsPanel, SettingsPanelProps};
pub use shadow_host::{HostLayer, ShadowHost, ShadowHostProps, ShadowParts, attach_closed_shadow};
#[cfg(feature = "csr")]
pub use shadow_host::{ShadowApp, ShadowAppProps, ShadowMount, mount_in_shadow};
pub use state::{Action, ChatState, View};
pub use style::{GgStyles, ThemeRoot, ThemeRootProps};
pub use tool_timeline::{ToolTimeline, ToolTimelineProps};
pub use types::*;
