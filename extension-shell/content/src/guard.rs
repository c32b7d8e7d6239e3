//! What keeps the page from taking over the host element and the overlay iframe.
//!
//! - [`HostGuard`]: a `MutationObserver` on the host's attributes and on the document element's
//!   children. A page script that rewrites the host's `style` (to hide it, make it transparent,
//!   move it or put it under its own elements), adds attributes to it (`hidden`, `inert`,
//!   `popover`, a `class`...), or takes the host out of the document element (removes it or
//!   moves it into an element of its own) gets it back as it was, in the same task (mutation
//!   observers run before the next paint). The page's style sheets cannot win either: every
//!   declaration of the host's inline style is `!important`.
//! - [`request_token`]: the one-time token of the overlay iframe, from the service worker.
//!
//! What a guard cannot undo — the page making its own `<html>` transparent, or covering the
//! panel with its own elements — is caught inside the overlay: its approval buttons stay
//! disabled while the iframe is not fully visible (IntersectionObserver v2).

use alloc::format;
use alloc::rc::Rc;
use alloc::string::{String, ToString};
use core::cell::RefCell;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use web_sys::{Document, Element, HtmlElement};

use crate::js::{self, Obj};

/// Protocol tag of every message (`gg_messages::PROTOCOL`).
const PROTOCOL: &str = "gemma-gem/1";
/// The only attributes the host has (anything else a page adds is removed).
pub const HOST_ATTRIBUTES: [&str; 2] = ["style", "data-gemma-gem"];
/// Hex digits of an overlay token (`gg_background::overlay_gate`).
const TOKEN_HEX: usize = 32;

/// Watches the host and puts back what the page changed.
pub struct HostGuard {
    /// The inline style this script last gave the host.
    style: Rc<RefCell<String>>,
    observer: JsValue,
    /// Keeps the observer's callback alive while the guard is.
    _callback: Closure<dyn FnMut(JsValue)>,
}

impl HostGuard {
    /// Starts watching `host` (already in the document, with `style` as its inline style);
    /// `moved` runs after the host was put back in its place (its iframe reloaded).
    pub fn start(
        document: &Document,
        host: &HtmlElement,
        style: &str,
        moved: impl Fn() + 'static,
    ) -> Result<Self, JsValue> {
        let expected = Rc::new(RefCell::new(style.to_string()));
        let root = document.document_element().ok_or("no document element")?;
        let callback = {
            let expected = expected.clone();
            let host = host.clone();
            let root = root.clone();
            let copy = current_copy();
            Closure::<dyn FnMut(JsValue)>::new(move |_records: JsValue| {
                // A copy of the script that crashed and was replaced does not fight the new
                // copy over the host (it would put back the host the new copy took out).
                if current_copy() != copy {
                    return;
                }
                if restore(&host, &root, &expected.borrow()) {
                    moved();
                }
            })
        };
        let observer = js::construct("MutationObserver", &[callback.as_ref().clone()])?;
        let watch_host = Obj::new().b("attributes", true).js();
        js::call(&observer, "observe", &[host.into(), watch_host])?;
        let watch_root = Obj::new().b("childList", true).js();
        js::call(&observer, "observe", &[root.into(), watch_root])?;
        Ok(Self {
            style: expected,
            observer,
            _callback: callback,
        })
    }

    /// Gives the host a new inline style (the one restored from now on).
    pub fn set_style(&self, host: &HtmlElement, style: &str) {
        *self.style.borrow_mut() = style.to_string();
        let _ = host.set_attribute("style", style);
    }

    /// Stops watching (before the host is removed on purpose).
    pub fn stop(&self) {
        let _ = js::call(&self.observer, "disconnect", &[]);
    }
}

impl Drop for HostGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Which copy of the module is in charge (`content.js` counts them; `None` outside it).
fn current_copy() -> Option<f64> {
    js::get_f64(&js_sys::global(), "__ggContentInstance")
}

/// Puts the host back as this script left it; `true` when it had to put it back in its place.
fn restore(host: &HtmlElement, root: &Element, style: &str) -> bool {
    if host.get_attribute("style").as_deref() != Some(style) {
        let _ = host.set_attribute("style", style);
        crate::log_debug("the page changed the host's style; restored");
    }
    for name in host.get_attribute_names().iter() {
        if let Some(name) = name.as_string()
            && !HOST_ATTRIBUTES.contains(&name.as_str())
        {
            let _ = host.remove_attribute(&name);
            crate::log_debug(&format!("the page set {name:?} on the host; removed"));
        }
    }
    if host.get_attribute("data-gemma-gem").is_none() {
        let _ = host.set_attribute("data-gemma-gem", "");
    }
    let parent = host.parent_node();
    if parent.as_ref() != Some(root.as_ref()) {
        // Removed or moved into an element of the page: back at the end of the document element
        // (the overlay iframe reloads there; the caller replaces it with a fresh token).
        let _ = root.append_child(host);
        crate::log_debug("the page took the host out of the document element; put back");
        return true;
    }
    false
}

/// Asks the service worker for a one-time overlay token; `done` gets it (or why not). Never
/// calls `done` before returning.
pub fn request_token(done: impl FnOnce(Result<String, String>) + 'static) {
    let done = Rc::new(RefCell::new(Some(done)));
    let finish = {
        let done = done.clone();
        move |r: Result<String, String>| {
            if let Some(f) = done.borrow_mut().take() {
                f(r);
            }
        }
    };
    let runtime = js::get(&js::get(&js_sys::global(), "chrome"), "runtime");
    let message = Obj::new()
        .s("protocol", PROTOCOL)
        .n("id", 0.0)
        .s("from", "content")
        .v("body", Obj::new().s("type", "overlay_token_request").js())
        .js();
    let promise = match js::call(&runtime, "sendMessage", &[message])
        .ok()
        .and_then(|p| p.dyn_into::<js_sys::Promise>().ok())
    {
        Some(p) => p,
        None => {
            // Later, as promised: the caller may hold its state borrowed.
            let f = Closure::once_into_js(move |_: JsValue| {
                finish(Err("chrome.runtime.sendMessage is not available".into()))
            });
            let resolved: JsValue = js_sys::Promise::resolve(&JsValue::UNDEFINED).into();
            let _ = js::call(&resolved, "then", &[f]);
            return;
        }
    };
    let ok = {
        let finish = finish.clone();
        Closure::once_into_js(move |answer: JsValue| finish(token_of(&answer)))
    };
    let err = Closure::once_into_js(move |e: JsValue| {
        finish(Err(format!(
            "the service worker did not answer: {}",
            js::get_str(&e, "message").unwrap_or_default()
        )))
    });
    let _ = js::call(&promise.into(), "then", &[ok, err]);
}

/// The token of the service worker's answer, checked for shape.
fn token_of(answer: &JsValue) -> Result<String, String> {
    let body = js::get(answer, "body");
    match js::get_str(&body, "type").as_deref() {
        Some("overlay_token") => {
            let token = js::get_str(&body, "token").unwrap_or_default();
            if valid_token(&token) {
                Ok(token)
            } else {
                Err("the service worker gave a malformed token".into())
            }
        }
        Some("error") => Err(js::get_str(&body, "message").unwrap_or_default()),
        _ => Err("unexpected answer to the token request".into()),
    }
}

/// 32 lowercase hex digits.
pub fn valid_token(token: &str) -> bool {
    token.len() == TOKEN_HEX
        && token
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The overlay iframe's URL: the page's URL of it (under the dynamic id) with the token as
/// fragment (never sent anywhere, not readable by the page).
pub fn frame_url(base: &str, token: &str) -> String {
    let base = base.split('#').next().unwrap_or(base);
    format!("{base}#{token}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_urls() {
        assert!(valid_token("0123456789abcdef0123456789abcdef"));
        assert!(!valid_token("0123456789ABCDEF0123456789abcdef"));
        assert!(!valid_token("0123456789abcdef"));
        assert!(!valid_token("0123456789abcdef0123456789abcdeg"));
        assert!(!valid_token(""));
        assert_eq!(
            frame_url("chrome-extension://x/overlay/overlay.html", "ab"),
            "chrome-extension://x/overlay/overlay.html#ab"
        );
        assert_eq!(
            frame_url("chrome-extension://x/overlay/overlay.html#old", "ab"),
            "chrome-extension://x/overlay/overlay.html#ab"
        );
    }
}
