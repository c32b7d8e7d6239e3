//! The vocabulary the agent and the in-page tools share: which built-in tools exist and what
//! they are called ([`Tool`]), and how a tool call fails ([`ToolErrorKind`]). The agent declares
//! the tools to the model and parses its calls with these names; the content script dispatches
//! the same names and answers failures with these kinds. `no_std`, no dependencies (`serde`
//! behind the `serde` feature: the agent's wire form), so the content script links it too.
//!
//! ```
//! use gg_vocab::{Tool, ToolErrorKind};
//!
//! assert_eq!(Tool::from_name("click_element"), Some(Tool::ClickElement));
//! assert_eq!(Tool::TypeText.name(), "type_text");
//! assert_eq!(Tool::from_name("no_such_tool"), None);
//! assert_eq!(ToolErrorKind::from_name("stale_ref"), Some(ToolErrorKind::StaleRef));
//! assert_eq!(ToolErrorKind::NotInteractable.name(), "not_interactable");
//! ```

#![no_std]

/// The built-in tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tool {
    /// `read_page_content {selector?, format: text|html, mode?: all|main, offset?, max_chars?}`.
    ReadPageContent,
    /// `snapshot_page {max_tokens?}`.
    SnapshotPage,
    /// `click_element {ref|selector}`.
    ClickElement,
    /// `type_text {ref|selector, text, submit?, clear?}`.
    TypeText,
    /// `scroll_page {direction, amount?}` or `{ref}`.
    ScrollPage,
    /// `get_page_title {}`.
    GetPageTitle,
    /// `take_screenshot {}` (run by the service worker, not in the page).
    TakeScreenshot,
    /// `run_javascript {code}` (run by the service worker, not in the page).
    RunJavascript,
}

impl Tool {
    /// All built-in tools, in declaration order.
    pub const ALL: [Self; 8] = [
        Self::ReadPageContent,
        Self::SnapshotPage,
        Self::ClickElement,
        Self::TypeText,
        Self::ScrollPage,
        Self::GetPageTitle,
        Self::TakeScreenshot,
        Self::RunJavascript,
    ];

    /// The name the model calls it by.
    pub fn name(self) -> &'static str {
        match self {
            Self::ReadPageContent => "read_page_content",
            Self::SnapshotPage => "snapshot_page",
            Self::ClickElement => "click_element",
            Self::TypeText => "type_text",
            Self::ScrollPage => "scroll_page",
            Self::GetPageTitle => "get_page_title",
            Self::TakeScreenshot => "take_screenshot",
            Self::RunJavascript => "run_javascript",
        }
    }

    /// The tool with this name, if it is built in.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }
}

/// What kind of failure a tool error is; lets the UI and the loop tell them apart. Its wire form
/// is [`ToolErrorKind::name`] (snake_case), with or without `serde`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum ToolErrorKind {
    /// The model called a tool that is not declared.
    UnknownTool,
    /// The model's call could not be parsed at all.
    MalformedCall,
    /// The arguments do not match the tool's parameters.
    InvalidArguments,
    /// The CSS selector is not valid.
    InvalidSelector,
    /// The ref is no longer in the page (it changed after the snapshot).
    StaleRef,
    /// Nothing matches the ref or selector.
    NotFound,
    /// The element is hidden, disabled, covered or detached.
    NotInteractable,
    /// The page does not allow it (e.g. its Content-Security-Policy forbids evaluation).
    Blocked,
    /// The user denied the call, or tools are turned off on this site.
    Denied,
    /// The tool cannot run here (no tab, unsupported page, not implemented by this executor).
    Unavailable,
    /// The tool did not finish in time.
    Timeout,
    /// Anything else.
    Failed,
}

impl ToolErrorKind {
    /// Every kind.
    pub const ALL: [Self; 12] = [
        Self::UnknownTool,
        Self::MalformedCall,
        Self::InvalidArguments,
        Self::InvalidSelector,
        Self::StaleRef,
        Self::NotFound,
        Self::NotInteractable,
        Self::Blocked,
        Self::Denied,
        Self::Unavailable,
        Self::Timeout,
        Self::Failed,
    ];

    /// The kind's wire name (snake_case, as `serde` writes it).
    pub fn name(self) -> &'static str {
        match self {
            Self::UnknownTool => "unknown_tool",
            Self::MalformedCall => "malformed_call",
            Self::InvalidArguments => "invalid_arguments",
            Self::InvalidSelector => "invalid_selector",
            Self::StaleRef => "stale_ref",
            Self::NotFound => "not_found",
            Self::NotInteractable => "not_interactable",
            Self::Blocked => "blocked",
            Self::Denied => "denied",
            Self::Unavailable => "unavailable",
            Self::Timeout => "timeout",
            Self::Failed => "failed",
        }
    }

    /// The kind of a wire name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::{Tool, ToolErrorKind};

    #[test]
    fn names_round_trip_and_are_distinct() {
        for (i, tool) in Tool::ALL.into_iter().enumerate() {
            assert_eq!(Tool::from_name(tool.name()), Some(tool));
            assert!(Tool::ALL[..i].iter().all(|t| t.name() != tool.name()));
        }
        for (i, kind) in ToolErrorKind::ALL.into_iter().enumerate() {
            assert_eq!(ToolErrorKind::from_name(kind.name()), Some(kind));
            assert!(
                ToolErrorKind::ALL[..i]
                    .iter()
                    .all(|k| k.name() != kind.name())
            );
        }
        assert_eq!(Tool::from_name("Click_Element"), None);
        assert_eq!(ToolErrorKind::from_name(""), None);
    }
}
