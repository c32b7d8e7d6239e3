//! The page tools, run in the page that embeds the widget: the allow-list (`tools`), the scope
//! (`scope`), `run_javascript` when the page opted in (`allow-javascript`), and every other tool
//! through the extension content script's own tool code (`gg_content::embedded`), so the widget
//! and the extension read and act on pages the same way.

use futures::future::LocalBoxFuture;
use gg_agent::{ToolError, ToolErrorKind, ToolOutput};
use gg_vocab::Tool;
use std::time::Duration;
use wasm_bindgen::{JsCast, JsValue};

/// How long `run_javascript` waits for a promise the code returned.
const RUN_JAVASCRIPT_TIMEOUT: Duration = Duration::from_secs(10);

pub struct PageTools {
    allowed: Vec<Tool>,
    scope: Option<String>,
    inner: crate::page_content::Tools,
}

/// The refusal of a tool the page does not allow (worded as the worker's, which refuses first:
/// this check only matters if a request reached the page anyway).
pub fn refusal(name: &str, allowed: &[Tool]) -> ToolError {
    ToolError::denied(gg_vocab::not_allowed(name, allowed))
}

impl PageTools {
    pub fn new() -> Self {
        Self {
            allowed: Vec::new(),
            scope: None,
            inner: crate::page_content::Tools::new(),
        }
    }

    pub fn configure(&mut self, scope: Option<String>, allowed: Vec<Tool>) {
        self.inner.configure(scope.clone(), &allowed);
        self.scope = scope;
        self.allowed = allowed;
    }

    /// Runs `call` (the worker's `run_tool` call, `{"name": ..., "args": {...}}`) in the page;
    /// resolves to the answer to post back as it is: `{"Ok": ToolOutput}` or
    /// `{"Err": ToolError}` in serde form.
    pub fn run(&self, call: serde_json::Value) -> LocalBoxFuture<'static, JsValue> {
        let name = call
            .get("name")
            .and_then(|n| n.as_str())
            .unwrap_or_default();
        let tool = Tool::from_name(name);
        match tool {
            Some(t) if self.allowed.contains(&t) => {}
            _ => {
                let refused = answer(&Err::<(), _>(refusal(name, &self.allowed)));
                return Box::pin(async move { refused });
            }
        }
        if tool == Some(Tool::RunJavascript) {
            let code = call
                .get("args")
                .and_then(|a| a.get("code"))
                .and_then(|c| c.as_str())
                .unwrap_or_default()
                .to_owned();
            return Box::pin(async move { answer(&run_javascript(code).await) });
        }
        self.inner.run(call)
    }

    /// Describes an element for the safety gate (`target`: the worker's `describe_element`
    /// target); resolves to `{"Ok": ElementFacts}` or `{"Err": ToolError}` in serde form.
    pub fn describe(&self, target: serde_json::Value) -> LocalBoxFuture<'static, JsValue> {
        self.inner.describe(target)
    }
}

/// A result in serde form as a JavaScript value (`{"Ok": ...}` / `{"Err": ...}`), to post as it is.
pub fn answer<T: serde::Serialize>(result: &Result<T, ToolError>) -> JsValue {
    serde_json::to_string(result)
        .ok()
        .and_then(|text| js_sys::JSON::parse(&text).ok())
        .unwrap_or(JsValue::NULL)
}

/// `run_javascript` in this page (the page opted in): the code is evaluated as a script in the
/// page's global scope (indirect eval; a CSP without `'unsafe-eval'` refuses it, reported as
/// `blocked`), a returned promise is awaited for at most [`RUN_JAVASCRIPT_TIMEOUT`], and the
/// answer is checked and capped as the extension's ([`gg_agent::javascript_answer`]).
async fn run_javascript(code: String) -> Result<ToolOutput, ToolError> {
    if code.trim().is_empty() {
        return Err(ToolError::new(
            ToolErrorKind::InvalidArguments,
            "run_javascript needs a non-empty `code` string",
        ));
    }
    let answer = match js_sys::eval(&code) {
        Err(e) => thrown(&e),
        Ok(value) => match value.dyn_into::<js_sys::Promise>() {
            Ok(promise) => {
                let wait = wasm_bindgen_futures::JsFuture::from(promise);
                let timeout = gloo_timers::future::sleep(RUN_JAVASCRIPT_TIMEOUT);
                match futures::future::select(wait, Box::pin(timeout)).await {
                    futures::future::Either::Left((Ok(v), _)) => ok_value(&v),
                    futures::future::Either::Left((Err(e), _)) => thrown(&e),
                    futures::future::Either::Right(_) => {
                        return Err(ToolError::new(
                            ToolErrorKind::Failed,
                            format!(
                                "the code did not finish within {} s, so the widget stopped \
                                 waiting for it (the page may still be running it); write code \
                                 that returns at once",
                                RUN_JAVASCRIPT_TIMEOUT.as_secs()
                            ),
                        ));
                    }
                }
            }
            Err(value) => ok_value(&value),
        },
    };
    gg_agent::javascript_answer(&answer)
}

fn ok_value(value: &JsValue) -> serde_json::Value {
    let value = if value.is_undefined() {
        serde_json::Value::Null
    } else {
        match js_sys::JSON::stringify(value) {
            Ok(s) => s
                .as_string()
                .and_then(|s| serde_json::from_str(&s).ok())
                .unwrap_or(serde_json::Value::Null),
            // A value JSON cannot write (a cycle, a BigInt): its text.
            Err(_) => serde_json::Value::String(
                js_sys::JsString::from(value.clone())
                    .as_string()
                    .unwrap_or_default(),
            ),
        }
    };
    serde_json::json!({"status": "ok", "value": value})
}

fn thrown(e: &JsValue) -> serde_json::Value {
    let message = e
        .dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| "unknown error".into());
    let blocked = e.is_instance_of::<js_sys::EvalError>()
        || message.contains("Content Security Policy")
        || message.contains("unsafe-eval");
    serde_json::json!({"status": if blocked { "blocked" } else { "error" }, "message": message})
}
