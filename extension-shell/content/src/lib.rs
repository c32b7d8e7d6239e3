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
mod snapshot;
mod text;
mod tools;

use alloc::format;
use alloc::string::String;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use web_sys::{Document, Element, HtmlElement, ShadowRoot, ShadowRootInit, ShadowRootMode};

#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

#[cfg(all(target_arch = "wasm32", not(test)))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

/// Tag name of the host element (a valid custom-element name, so `attachShadow` is allowed).
pub const HOST_TAG: &str = "gemma-gem-host";
/// Path of the overlay page inside the extension.
pub const OVERLAY_PATH: &str = "overlay/overlay.html";
const LOG_PREFIX: &str = "[Gemma Gem]";

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = ["chrome", "runtime"], js_name = getURL)]
    fn runtime_get_url(path: &str) -> String;
}

fn log_error(msg: &str) {
    web_sys::console::error_1(&JsValue::from_str(&format!("{LOG_PREFIX} {msg}")));
}

fn log_debug(msg: &str) {
    if cfg!(feature = "dev-log") {
        web_sys::console::debug_1(&JsValue::from_str(&format!("{LOG_PREFIX} {msg}")));
    }
}

/// Inline style of the host element. Inline `!important` declarations win over any `!important`
/// rule of the page's own style sheets, so hostile page CSS cannot hide or restyle the host.
const HOST_STYLE_COLLAPSED: &str = "all: initial !important; display: block !important; position: fixed !important; \
    right: 16px !important; bottom: 16px !important; width: 56px !important; height: 56px !important; \
    z-index: 2147483647 !important; margin: 0 !important; padding: 0 !important; border: 0 !important; \
    background: transparent !important; visibility: visible !important; opacity: 1 !important; \
    transform: none !important; pointer-events: auto !important; contain: strict !important;";
const HOST_STYLE_OPEN: &str = "all: initial !important; display: block !important; position: fixed !important; \
    right: 16px !important; bottom: 16px !important; width: min(420px, calc(100vw - 32px)) !important; \
    height: min(640px, calc(100vh - 32px)) !important; z-index: 2147483647 !important; margin: 0 !important; \
    padding: 0 !important; border: 0 !important; background: transparent !important; visibility: visible !important; \
    opacity: 1 !important; transform: none !important; pointer-events: auto !important; contain: strict !important;";

/// Styles inside the shadow root; the page's style sheets cannot reach them.
const SHADOW_CSS: &str = ":host { all: initial; }\n\
    .launcher { all: initial; box-sizing: border-box; position: absolute; right: 4px; bottom: 4px; width: 48px; height: 48px; \
      border-radius: 50%; cursor: pointer; display: flex; align-items: center; justify-content: center; \
      background: linear-gradient(135deg, #6d5dfc 0%, #3ab0ff 100%); color: #fff; font: 600 20px/1 system-ui, sans-serif; \
      box-shadow: 0 4px 14px rgba(0, 0, 0, .28); transition: transform .15s ease; }\n\
    .launcher:hover { transform: scale(1.06); }\n\
    .launcher:focus-visible { outline: 3px solid #ffbf47; outline-offset: 2px; }\n\
    .panel { all: initial; display: block; position: absolute; inset: 0 0 60px 0; width: 100%; height: calc(100% - 60px); \
      border: 0; border-radius: 14px; box-shadow: 0 12px 40px rgba(0, 0, 0, .3); background: #fff; }\n\
    .panel[hidden] { display: none; }\n\
    @media (prefers-reduced-motion: reduce) { .launcher { transition: none; } }\n";

fn create(document: &Document, tag: &str) -> Result<Element, JsValue> {
    document.create_element(tag)
}

/// Entry point, called by the loader `content.js`.
#[wasm_bindgen]
pub fn start() {
    if let Err(e) = mount() {
        log_error(&format!("could not mount the launcher: {e:?}"));
    }
    if let Err(e) = listen() {
        log_error(&format!("could not listen for tool calls: {e:?}"));
    }
}

/// Protocol tag of every message (`gg_messages::PROTOCOL`).
const PROTOCOL: &str = "gemma-gem/1";

/// Answers tool calls from this extension's service worker (`chrome.runtime.onMessage`).
fn listen() -> Result<(), JsValue> {
    let runtime = js::get(&js::get(&js_sys::global(), "chrome"), "runtime");
    let own_id = js::get_str(&runtime, "id").ok_or("no extension id")?;
    let on_message = js::get(&runtime, "onMessage");
    let mut state = tools::State::new();
    let listener = Closure::<dyn FnMut(JsValue, JsValue, JsValue) -> JsValue>::new(
        move |message: JsValue, sender: JsValue, respond: JsValue| {
            if let Some(answer) = answer(&mut state, &own_id, &message, &sender)
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
            let outcome = state
                .execute(&name, &args)
                .map(|value| js::Obj::new().v("value", value).js());
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

fn mount() -> Result<(), JsValue> {
    let window = web_sys::window().ok_or("no window")?;
    let protocol = window.location().protocol()?;
    if protocol != "http:" && protocol != "https:" {
        return Ok(());
    }
    let document = window.document().ok_or("no document")?;
    // A previous copy of this script (before an extension reload) leaves its host behind.
    if let Some(old) = document.query_selector(HOST_TAG)? {
        old.remove();
    }
    let host: HtmlElement = create(&document, HOST_TAG)?.dyn_into()?;
    host.set_attribute("style", HOST_STYLE_COLLAPSED)?;
    host.set_attribute("data-gemma-gem", "")?;
    let init = ShadowRootInit::new(ShadowRootMode::Closed);
    let root: ShadowRoot = host.attach_shadow(&init)?;

    let style = create(&document, "style")?;
    style.set_text_content(Some(SHADOW_CSS));
    root.append_child(&style)?;

    let button = create(&document, "button")?;
    button.set_class_name("launcher");
    button.set_attribute("type", "button")?;
    button.set_attribute("data-testid", "gg-launcher")?;
    button.set_attribute("data-status", "idle")?;
    button.set_attribute("aria-label", "Open Gemma Gem")?;
    button.set_attribute("aria-expanded", "false")?;
    button.set_text_content(Some("\u{25C6}"));
    root.append_child(&button)?;

    let on_click = {
        let host = host.clone();
        let root = root.clone();
        let button = button.clone();
        let document = document.clone();
        Closure::<dyn FnMut()>::new(move || {
            if let Err(e) = toggle(&document, &host, &root, &button) {
                log_error(&format!("could not open the panel: {e:?}"));
            }
        })
    };
    button.add_event_listener_with_callback("click", on_click.as_ref().unchecked_ref())?;
    // The listener lives as long as the page.
    on_click.forget();

    let parent = document.document_element().ok_or("no document element")?;
    parent.append_child(&host)?;
    log_debug("launcher mounted");
    Ok(())
}

/// Opens or closes the panel: the overlay page in an iframe, created on first use.
fn toggle(
    document: &Document,
    host: &HtmlElement,
    root: &ShadowRoot,
    button: &Element,
) -> Result<(), JsValue> {
    let frame = match root.query_selector("iframe.panel")? {
        Some(frame) => frame,
        None => {
            let frame = create(document, "iframe")?;
            frame.set_class_name("panel");
            frame.set_attribute("data-testid", "gg-panel-frame")?;
            frame.set_attribute("title", "Gemma Gem")?;
            frame.set_attribute("hidden", "")?;
            frame.set_attribute("src", &runtime_get_url(OVERLAY_PATH))?;
            root.insert_before(&frame, Some(button))?;
            frame
        }
    };
    let open = frame.has_attribute("hidden");
    if open {
        frame.remove_attribute("hidden")?;
        host.set_attribute("style", HOST_STYLE_OPEN)?;
    } else {
        frame.set_attribute("hidden", "")?;
        host.set_attribute("style", HOST_STYLE_COLLAPSED)?;
    }
    button.set_attribute("aria-expanded", if open { "true" } else { "false" })?;
    button.set_attribute(
        "aria-label",
        if open {
            "Close Gemma Gem"
        } else {
            "Open Gemma Gem"
        },
    )?;
    Ok(())
}
