//! Bridge to the content script's tool code (`gg_content::embedded`). Placeholder until that
//! API lands: every call is refused with a clear message.

use futures::future::LocalBoxFuture;
use gg_agent::{ElementFacts, ElementTarget, ToolCall, ToolError, ToolErrorKind, ToolOutput};
use gg_vocab::Tool;

pub struct Tools;

impl Tools {
    pub fn new() -> Self {
        Self
    }

    pub fn configure(&mut self, _scope: Option<String>, _allowed: &[Tool]) {}

    pub fn run(&self, call: ToolCall) -> LocalBoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            Err(ToolError::new(
                ToolErrorKind::Unavailable,
                format!("{} is not available in this build of the widget", call.name),
            ))
        })
    }

    pub fn describe(
        &self,
        _target: ElementTarget,
    ) -> LocalBoxFuture<'static, Result<ElementFacts, ToolError>> {
        Box::pin(async move {
            Err(ToolError::new(
                ToolErrorKind::Unavailable,
                "element facts are not available in this build of the widget",
            ))
        })
    }
}
