//! The content script's own tool code (`gg_content::embedded`), run in the page the widget is
//! embedded in: confined to the `scope` attribute's element and to the `tools` allow-list.
//!
//! The scope is a selector, looked up again before every call (the page may render its main
//! element after the widget started, or replace it); a scope that matches nothing, or is not a
//! valid selector, refuses the call: the tools never fall back to the whole page.

use futures::future::LocalBoxFuture;
use gg_agent::{ToolError, ToolErrorKind};
use gg_content::embedded::PageTools;
use gg_vocab::Tool;
use std::rc::Rc;
use wasm_bindgen::JsValue;

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

    /// Runs `call` (a JSON tool call) with the content script's tools; resolves to their answer,
    /// `{"Ok": {"value": ...}}` or `{"Err": {"kind": ..., "message": ...}}`, as it is.
    pub fn run(&self, call: serde_json::Value) -> LocalBoxFuture<'static, JsValue> {
        let aimed = self.aim();
        let tools = self.inner.clone();
        Box::pin(async move {
            match aimed.and_then(|()| js(&call)) {
                Ok(call) => tools.run_value(&call).await,
                Err(e) => crate::page::answer(&Err::<(), _>(e)),
            }
        })
    }

    /// The gate's facts about `target` (a JSON element target); resolves to
    /// `{"Ok": facts}` or `{"Err": ...}` as the tools answer.
    pub fn describe(&self, target: serde_json::Value) -> LocalBoxFuture<'static, JsValue> {
        let aimed = self.aim();
        let tools = self.inner.clone();
        Box::pin(async move {
            match aimed.and_then(|()| js(&target)) {
                Ok(target) => tools.describe_value(&target).await,
                Err(e) => crate::page::answer(&Err::<(), _>(e)),
            }
        })
    }
}

/// A JSON value as the plain JavaScript object the tools read.
fn js(value: &serde_json::Value) -> Result<JsValue, ToolError> {
    js_sys::JSON::parse(&value.to_string()).map_err(|_| {
        ToolError::new(
            ToolErrorKind::MalformedCall,
            "the worker's request could not be passed to the page tools",
        )
    })
}
