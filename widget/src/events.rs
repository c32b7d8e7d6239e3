//! The element's DOM events, so that a site can react: `gg-status` (the model's state),
//! `gg-token` (answer text), `gg-tool` (a tool call started, asks for approval, ended),
//! `gg-answer` (a turn ended: its final answer) and `gg-error` (something failed). Each is a
//! `CustomEvent` on the element (bubbling, not composed: the element is in the page's own tree)
//! whose `detail` is plain JSON data.

use gg_agent::AgentEvent;
use gg_messages::{ModelReport, ModelState};
use serde_json::{Value, json};
use wasm_bindgen::JsValue;
use web_sys::{CustomEvent, CustomEventInit, HtmlElement};

fn fire(element: &HtmlElement, name: &str, detail: &Value) {
    let init = CustomEventInit::new();
    init.set_bubbles(true);
    let detail = js_sys::JSON::parse(&detail.to_string()).unwrap_or(JsValue::NULL);
    init.set_detail(&detail);
    if let Ok(event) = CustomEvent::new_with_event_init_dict(name, &init) {
        let _ = element.dispatch_event(&event);
    }
}

/// `gg-status`: `{phase, ...}` as the worker reports the model (`downloading` with
/// `loaded_bytes`/`total_bytes`/`percent`, `initializing`, `ready`, `failed`, `not_loaded`).
pub fn status(element: &HtmlElement, report: &ModelReport) {
    let mut detail = serde_json::to_value(&report.state).unwrap_or(Value::Null);
    if let (Value::Object(map), ModelState::Downloading(p)) = (&mut detail, &report.state) {
        // The per-file list stays in the worker's report; the event carries the totals.
        map.remove("files");
        map.insert("files_total".into(), json!(p.files.len()));
    }
    if let Value::Object(map) = &mut detail {
        map.insert("model_size".into(), json!(report.model_size));
        map.insert("source".into(), json!(report.source));
    }
    fire(element, "gg-status", &detail);
}

/// `gg-token`, `gg-tool` for one agent event of turn `turn` (others fire nothing).
pub fn agent(element: &HtmlElement, turn: u64, event: &AgentEvent) {
    match event {
        AgentEvent::Token { text } => {
            fire(element, "gg-token", &json!({"turn": turn, "text": text}))
        }
        AgentEvent::ToolStart { call_id, call, .. } => fire(
            element,
            "gg-tool",
            &json!({"turn": turn, "phase": "start", "call_id": call_id.to_string(),
                    "name": call.name, "args": call.args}),
        ),
        AgentEvent::AwaitingApproval { request } => fire(
            element,
            "gg-tool",
            &json!({"turn": turn, "phase": "approval", "call_id": request.call_id.to_string(),
                    "name": request.call.name, "reason": request.summary}),
        ),
        AgentEvent::ToolResult {
            call_id, output, ..
        } => fire(
            element,
            "gg-tool",
            &json!({"turn": turn, "phase": "end", "ok": true, "call_id": call_id.to_string(),
                    "result": output.value}),
        ),
        AgentEvent::ToolError {
            call_id,
            name,
            error,
        } => fire(
            element,
            "gg-tool",
            &json!({"turn": turn, "phase": "end", "ok": false, "call_id": call_id.to_string(),
                    "name": name, "error": {"kind": error.kind, "message": error.message}}),
        ),
        _ => {}
    }
}

/// `gg-answer`: the turn ended; `text` is its final answer (after the last tool call) and
/// `reason` why it ended (`{kind: "end_of_turn"}`, `"cancelled"`, `"max_new_tokens"`, ...).
pub fn answer(element: &HtmlElement, turn: u64, text: &str, reason: &Value) {
    fire(
        element,
        "gg-answer",
        &json!({"turn": turn, "text": text, "reason": reason}),
    );
}

/// `gg-error`: `{kind, message}`.
pub fn error(element: &HtmlElement, kind: &str, message: &str) {
    fire(
        element,
        "gg-error",
        &json!({"kind": kind, "message": message}),
    );
}
