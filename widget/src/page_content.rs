//! The content script's own tool code (`gg_content::embedded`), run in the page the widget is
//! embedded in: confined to the `scope` attribute's element and to the `tools` allow-list.
//!
//! The scope is a selector, looked up again before every call (the page may render its main
//! element after the widget started, or replace it); a scope that matches nothing, or is not a
//! valid selector, refuses the call: the tools never fall back to the whole page.

use futures::future::LocalBoxFuture;
use gg_agent::{ElementFacts, ElementTarget, ToolCall, ToolError, ToolErrorKind, ToolOutput};
use gg_content::embedded::PageTools;
use gg_vocab::Tool;
use std::rc::Rc;

pub struct Tools {
    inner: Rc<PageTools>,
    scope: Option<String>,
}

impl Tools {
    pub fn new() -> Self {
        Self {
            inner: Rc::new(PageTools::new(None, &[])),
            scope: None,
        }
    }

    /// The page's scope selector and allowed tools (`run_javascript` is the widget's own).
    pub fn configure(&mut self, scope: Option<String>, allowed: &[Tool]) {
        let in_page: Vec<Tool> = allowed
            .iter()
            .copied()
            .filter(|t| !matches!(t, Tool::RunJavascript | Tool::TakeScreenshot))
            .collect();
        self.inner.set_allowed(&in_page);
        self.scope = scope;
    }

    /// Points the tools at the scope's element now.
    fn aim(&self) -> Result<(), ToolError> {
        let Some(selector) = &self.scope else {
            self.inner.set_scope(None);
            return Ok(());
        };
        let document = web_sys::window()
            .and_then(|w| w.document())
            .ok_or_else(|| ToolError::new(ToolErrorKind::Unavailable, "no page to act on"))?;
        match document.query_selector(selector) {
            Ok(Some(element)) => {
                self.inner.set_scope(Some(element));
                Ok(())
            }
            Ok(None) => Err(ToolError::new(
                ToolErrorKind::Unavailable,
                format!(
                    "the widget's scope `{selector}` matches no element on this page, so no page \
                     tool can run"
                ),
            )),
            Err(_) => Err(ToolError::new(
                ToolErrorKind::Unavailable,
                format!("the widget's scope `{selector}` is not a valid CSS selector"),
            )),
        }
    }

    pub fn run(&self, call: ToolCall) -> LocalBoxFuture<'static, Result<ToolOutput, ToolError>> {
        let aimed = self.aim();
        let tools = self.inner.clone();
        Box::pin(async move {
            aimed?;
            tools.call(&call).await
        })
    }

    pub fn describe(
        &self,
        target: ElementTarget,
    ) -> LocalBoxFuture<'static, Result<ElementFacts, ToolError>> {
        let aimed = self.aim();
        let tools = self.inner.clone();
        Box::pin(async move {
            aimed?;
            tools.element_facts(&target).await
        })
    }
}
