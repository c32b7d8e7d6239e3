//! Tools: what the model is told about them ([`ToolDefinition`]), what running one gives
//! ([`ToolOutput`] or [`ToolError`]) and who runs them ([`ToolExecutor`]).
//!
//! The executor is implemented by the extension (content script and service worker) and by the
//! demo widget. Besides running calls it answers two questions for the
//! [safety gate](crate::gate): which site the tab is on, and what an element is (a password field,
//! a submit button, a link to another site...), so the gate can stay free of any DOM code.
//!
//! ```
//! use futures::future::LocalBoxFuture;
//! use gg_agent::{ElementFacts, ElementTarget, ToolCall, ToolError, ToolExecutor, ToolOutput};
//! use serde_json::json;
//!
//! /// A toy executor: every page is titled "Example" and has no elements.
//! struct TitleOnly;
//!
//! impl ToolExecutor for TitleOnly {
//!     fn execute<'a>(&'a self, call: &'a ToolCall) -> LocalBoxFuture<'a, Result<ToolOutput, ToolError>> {
//!         Box::pin(async move {
//!             match call.name.as_str() {
//!                 "get_page_title" => Ok(ToolOutput::new(json!({"title": "Example"}))),
//!                 other => Err(ToolError::unavailable(format!("{other} is not supported here"))),
//!             }
//!         })
//!     }
//!     fn element_facts<'a>(&'a self, target: &'a ElementTarget) -> LocalBoxFuture<'a, Result<ElementFacts, ToolError>> {
//!         Box::pin(async move { Err(ToolError::not_found(format!("no element {target}"))) })
//!     }
//!     fn current_site(&self) -> LocalBoxFuture<'_, Result<String, ToolError>> {
//!         Box::pin(async { Ok("https://example.com".to_owned()) })
//!     }
//! }
//!
//! let call = ToolCall::new("get_page_title", Default::default());
//! let output = futures::executor::block_on(TitleOnly.execute(&call)).unwrap();
//! assert_eq!(output.value["title"], "Example");
//! ```

use std::fmt;

use futures::future::LocalBoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::facts::ElementFacts;
use crate::message::{ImagePart, ToolCall};

/// A tool as declared to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The name the model calls it by (`snake_case`).
    pub name: String,
    /// What it does and when to use it, written for the model.
    pub description: String,
    /// The parameters as a JSON Schema object (`{"type": "object", "properties": ..., "required": ...}`).
    pub parameters: Value,
}

/// What a tool returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// The result, as JSON (it must be JSON-safe and size-capped by the tool).
    pub value: Value,
    /// Images to show the model (e.g. the screenshot of `take_screenshot`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImagePart>,
}

impl ToolOutput {
    /// An output with a JSON value and no images.
    pub fn new(value: Value) -> Self {
        Self {
            value,
            images: Vec::new(),
        }
    }

    /// Adds an image.
    pub fn with_image(mut self, image: ImagePart) -> Self {
        self.images.push(image);
        self
    }
}

/// What kind of failure a [`ToolError`] is; lets the UI and the loop tell them apart (shared
/// with the content script: [`gg_vocab::ToolErrorKind`]).
pub use gg_vocab::ToolErrorKind;

/// A tool failure the model can read and recover from.
///
/// The message is shown to the model as it is, so it should say what went wrong and what to do
/// next ("ref e12 is gone: the page changed; call snapshot_page for fresh refs"). It must be
/// written by the tool, not copied from page text: tool errors are not wrapped as untrusted data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// The kind of failure.
    pub kind: ToolErrorKind,
    /// What went wrong and what to do, for the model.
    pub message: String,
}

macro_rules! tool_error_constructors {
    ($($(#[$doc:meta])* $fn_name:ident => $kind:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $fn_name(message: impl Into<String>) -> Self {
                Self::new(ToolErrorKind::$kind, message)
            }
        )*
    };
}

impl ToolError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    tool_error_constructors! {
        /// [`ToolErrorKind::InvalidArguments`].
        invalid_arguments => InvalidArguments;
        /// [`ToolErrorKind::InvalidSelector`].
        invalid_selector => InvalidSelector;
        /// [`ToolErrorKind::StaleRef`].
        stale_ref => StaleRef;
        /// [`ToolErrorKind::NotFound`].
        not_found => NotFound;
        /// [`ToolErrorKind::NotInteractable`].
        not_interactable => NotInteractable;
        /// [`ToolErrorKind::Blocked`].
        blocked => Blocked;
        /// [`ToolErrorKind::Denied`].
        denied => Denied;
        /// [`ToolErrorKind::Unavailable`].
        unavailable => Unavailable;
        /// [`ToolErrorKind::Timeout`].
        timeout => Timeout;
        /// [`ToolErrorKind::Failed`].
        failed => Failed;
    }
}

/// How a tool call names an element: a ref from `snapshot_page` (`e12`) or a CSS selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ElementTarget {
    /// A snapshot ref such as `e12`.
    Ref(String),
    /// A CSS selector.
    Selector(String),
}

impl fmt::Display for ElementTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ref(r) => write!(f, "ref {r}"),
            Self::Selector(s) => write!(f, "selector `{s}`"),
        }
    }
}

/// Runs tool calls, and tells the safety gate about the page.
///
/// Implemented by the extension and the demo widget. All methods return local (non-`Send`)
/// futures so that single-threaded wasm code can implement them.
pub trait ToolExecutor {
    /// Runs a call. The loop has already checked the tool is declared, normalized the arguments
    /// of built-in tools (see [`BuiltinCall`](crate::BuiltinCall)) and passed the safety gate.
    /// A stale ref or a bad selector is an `Err` the model can recover from, never a panic.
    /// The gate judged the element described by [`ToolExecutor::element_facts`]: if the target
    /// no longer is that element (the page replaced it in between), return
    /// [`ToolErrorKind::StaleRef`] rather than act on something else.
    fn execute<'a>(
        &'a self,
        call: &'a ToolCall,
    ) -> LocalBoxFuture<'a, Result<ToolOutput, ToolError>>;

    /// Facts about the element a call targets, for the safety gate: field type, autocomplete,
    /// form, link destination. Must never include a field's value. An error (stale ref, bad
    /// selector) is given back to the model and the call does not run.
    fn element_facts<'a>(
        &'a self,
        target: &'a ElementTarget,
    ) -> LocalBoxFuture<'a, Result<ElementFacts, ToolError>>;

    /// The origin of the page the tools act on, e.g. `https://example.com`. Used as the key of
    /// per-site permissions and to detect calls that would leave the site.
    fn current_site(&self) -> LocalBoxFuture<'_, Result<String, ToolError>>;

    /// Runs a call on the element the gate judged: `element` is
    /// [`ElementFacts::identity`](crate::ElementFacts::identity) of the facts the decision (and
    /// the user's approval) was made on. An executor that names elements must refuse
    /// ([`ToolErrorKind::StaleRef`]) when the target is another element by now. The default
    /// runs [`ToolExecutor::execute`], for executors that give no identities.
    fn execute_on<'a>(
        &'a self,
        call: &'a ToolCall,
        element: Option<&'a str>,
    ) -> LocalBoxFuture<'a, Result<ToolOutput, ToolError>> {
        let _ = element;
        self.execute(call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_error_serializes_with_kind_and_message() {
        let error = ToolError::stale_ref("ref e4 is gone; call snapshot_page again");
        assert_eq!(
            serde_json::to_value(&error).unwrap(),
            json!({"kind": "stale_ref", "message": "ref e4 is gone; call snapshot_page again"})
        );
        assert_eq!(
            error.to_string(),
            "ref e4 is gone; call snapshot_page again"
        );
    }

    #[test]
    fn element_target_serializes_tagged() {
        let target = ElementTarget::Ref("e1".to_owned());
        assert_eq!(serde_json::to_value(&target).unwrap(), json!({"ref": "e1"}));
        assert_eq!(target.to_string(), "ref e1");
    }
}
