//! The content script, injected into every http(s) page.
//!
//! It must run on pages whose Content-Security-Policy forbids WebAssembly, so this crate is
//! `no_std` + `alloc`, built for `wasm32v1-none` and translated to plain JavaScript by `wasm2js`
//! (see `cargo xtask build`). It creates the host element with a **closed** shadow root, draws the
//! launcher inside it and, when opened, shows the overlay page (an extension page, which may use
//! WebAssembly) in an iframe. Keep it small: it is loaded on every page.
#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

mod dom;
mod js;
mod panel;
mod snapshot;
mod text;
mod tools;

use alloc::format;

use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

#[cfg(all(target_arch = "wasm32", not(test)))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

pub use panel::{HOST_TAG, OVERLAY_PATH};

const LOG_PREFIX: &str = "[Gemma Gem]";

fn log_error(msg: &str) {
    web_sys::console::error_1(&JsValue::from_str(&format!("{LOG_PREFIX} {msg}")));
}

fn log_debug(msg: &str) {
    if cfg!(feature = "dev-log") {
        web_sys::console::debug_1(&JsValue::from_str(&format!("{LOG_PREFIX} {msg}")));
    }
}

/// Entry point, called by the loader `content.js`.
#[wasm_bindgen]
pub fn start() {
    let window_ok = web_sys::window()
        .and_then(|w| w.location().protocol().ok())
        .is_some_and(|p| p == "http:" || p == "https:");
    if !window_ok {
        return;
    }
    let panel = match panel::start() {
        Ok(panel) => Some(panel),
        Err(e) => {
            log_error(&format!("could not mount the launcher: {e:?}"));
            None
        }
    };
    if let Err(e) = listen(panel) {
        log_error(&format!("could not listen for tool calls: {e:?}"));
    }
}

/// Protocol tag of every message (`gg_messages::PROTOCOL`).
const PROTOCOL: &str = "gemma-gem/1";

/// Answers tool calls from this extension's service worker (`chrome.runtime.onMessage`).
fn listen(panel: Option<panel::Shared>) -> Result<(), JsValue> {
    let runtime = js::get(&js::get(&js_sys::global(), "chrome"), "runtime");
    let own_id = js::get_str(&runtime, "id").ok_or("no extension id")?;
    let on_message = js::get(&runtime, "onMessage");
    let mut state = tools::State::new();
    let listener = Closure::<dyn FnMut(JsValue, JsValue, JsValue) -> JsValue>::new(
        move |message: JsValue, sender: JsValue, respond: JsValue| {
            if let Some(answer) = answer(&mut state, panel.as_ref(), &own_id, &message, &sender)
                && let Ok(respond) = respond.dyn_into::<js_sys::Function>()
                && let Err(e) = respond.call1(&JsValue::UNDEFINED, &answer)
            {
                log_error(&format!("could not answer a tool call: {e:?}"));
            }
            // The answer (if any) was given synchronously.
            JsValue::FALSE
        },
    );
    js::call(&on_message, "addListener", &[listener.as_ref().clone()])?;
    // The listener lives as long as the page.
    listener.forget();
    Ok(())
}

/// The answer to a message, or `None` for anything that is not a request of ours from our own
/// service worker (other extensions, our extension pages in tabs, foreign shapes).
fn answer(
    state: &mut tools::State,
    panel: Option<&panel::Shared>,
    own_id: &str,
    message: &JsValue,
    sender: &JsValue,
) -> Option<JsValue> {
    if js::get_str(sender, "id").as_deref() != Some(own_id) {
        return None;
    }
    let tab = js::get(sender, "tab");
    if !tab.is_undefined() && !tab.is_null() {
        return None;
    }
    let origin = format!("chrome-extension://{own_id}/");
    if js::get_str(sender, "url").is_some_and(|url| !url.starts_with(&origin)) {
        return None;
    }
    if js::get_str(message, "protocol").as_deref() != Some(PROTOCOL)
        || js::get_str(message, "from").as_deref() != Some("service_worker")
    {
        return None;
    }
    let id = js::get(message, "id");
    id.as_f64()?;
    let body = js::get(message, "body");
    let result = |r: Result<JsValue, tools::ToolErr>| match r {
        Ok(v) => js::Obj::new().v("Ok", v).js(),
        Err(e) => js::Obj::new().v("Err", e.to_js()).js(),
    };
    let reply = match js::get_str(&body, "type")?.as_str() {
        "execute_tool" => {
            let call_id = js::get_str(&body, "call_id")?;
            let call = js::get(&body, "call");
            let name = js::get_str(&call, "name")?;
            let args = js::get(&call, "args");
            log_debug(&format!("tool call {call_id}: {name}"));
            let outcome = if panel.is_some_and(panel::is_disabled) {
                Err(tools::ToolErr::unavailable(
                    "Gemma Gem is turned off on this site (settings: disabled sites); no page \
                     tool runs here",
                ))
            } else {
                state
                    .execute(&name, &args)
                    .map(|value| js::Obj::new().v("value", value).js())
            };
            if let Err(e) = &outcome {
                log_debug(&format!(
                    "tool call {call_id} failed: {}: {}",
                    e.kind, e.message
                ));
            }
            js::Obj::new()
                .s("type", "tool_outcome")
                .s("call_id", &call_id)
                .v("result", result(outcome))
        }
        "get_element_facts" => {
            let facts = state.element_facts(&js::get(&body, "target"));
            js::Obj::new()
                .s("type", "element_facts")
                .v("result", result(facts))
        }
        "panel_command" => {
            let command = panel::Command::parse(&js::get_str(&body, "action")?)?;
            if let Some(panel) = panel
                && let Err(e) = panel::run(panel, command)
            {
                log_error(&format!("could not {command:?} the panel: {e:?}"));
            }
            js::Obj::new().s("type", "ack")
        }
        _ => return None,
    };
    Some(
        js::Obj::new()
            .s("protocol", PROTOCOL)
            .v("id", id)
            .s("from", "content")
            .v("body", reply.js())
            .js(),
    )
}
