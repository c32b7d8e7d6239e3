//! The content script, injected into every http(s) page, and (feature `embedded`) the same page
//! tools as a library for the embeddable widget.
//!
//! It must run on pages whose Content-Security-Policy forbids WebAssembly, so this crate is
//! `no_std` + `alloc`, built for `wasm32v1-none` and translated to plain JavaScript by `wasm2js`
//! (see `cargo xtask build`). It creates the host element with a **closed** shadow root, draws the
//! launcher inside it and, when opened, shows the overlay page (an extension page, which may use
//! WebAssembly) in an iframe. Keep it small: it is loaded on every page.
//!
//! The loader `content.js` receives the messages (`chrome.runtime.onMessage`) and hands them to
//! `on_message`. When this module fails (a panic traps: there is no unwinding here), the loader
//! starts a fresh copy of it, which answers the calls the failed one left (`recover`) and tells
//! the service worker (`report_crash`); the page tools never stay dead.
//!
//! # The `embedded` feature
//!
//! With `embedded`, the crate is a library for a `std` crate built for `wasm32-unknown-unknown`
//! (the widget, `gg-widget`): not `no_std`, no global allocator, no panic handler, no launcher
//! panel, no `chrome.runtime` code and no exports of its own; the page tools are reached through
//! `embedded::PageTools`, which schedules its own slices and confines the tools to a scope and
//! an allow-list. The feature takes things away, so it must never be on in the content script's
//! build (`cargo xtask build` builds `-p gg-content` alone for `wasm32v1-none`, without it).
#![cfg_attr(all(target_arch = "wasm32", not(feature = "embedded")), no_std)]

extern crate alloc;

mod dom;
#[cfg(feature = "embedded")]
pub mod embedded;
#[cfg(not(feature = "embedded"))]
mod guard;
mod js;
#[cfg(not(feature = "embedded"))]
mod panel;
mod pristine;
mod read;
mod scope;
mod secret;
#[cfg(not(feature = "embedded"))]
mod server;
mod slices;
mod snapshot;
mod text;
mod tools;

use alloc::format;
#[cfg(not(feature = "embedded"))]
use core::cell::RefCell;

use wasm_bindgen::prelude::*;

#[cfg(all(target_arch = "wasm32", not(feature = "embedded")))]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

#[cfg(not(feature = "embedded"))]
#[wasm_bindgen]
extern "C" {
    /// The loader's panic hook (`content.js`), which passes the message on with the crash.
    #[wasm_bindgen(catch, js_namespace = globalThis, js_name = __ggContentPanic)]
    fn panic_hook(message: &str) -> Result<(), JsValue>;
    #[wasm_bindgen(js_namespace = console, js_name = error)]
    fn console_error(message: &str);
}

/// Writes a panic message into a fixed buffer: the heap may be what failed.
#[cfg(all(target_arch = "wasm32", not(test), not(feature = "embedded")))]
struct PanicText {
    bytes: [u8; 1024],
    len: usize,
}

#[cfg(all(target_arch = "wasm32", not(test), not(feature = "embedded")))]
impl core::fmt::Write for PanicText {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let mut n = s.len().min(self.bytes.len() - self.len);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

#[cfg(all(target_arch = "wasm32", not(test), not(feature = "embedded")))]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    use core::fmt::Write;
    use core::sync::atomic::{AtomicBool, Ordering};
    static PANICKING: AtomicBool = AtomicBool::new(false);
    // A panic while reporting one (formatting needed the broken heap) just stops.
    if !PANICKING.swap(true, Ordering::Relaxed) {
        let mut text = PanicText {
            bytes: [0; 1024],
            len: 0,
        };
        let _ = write!(text, "{LOG_PREFIX} the page tools panicked: ");
        let lead = text.len;
        let _ = write!(text, "{info}");
        let message = core::str::from_utf8(&text.bytes[..text.len]).unwrap_or(LOG_PREFIX);
        console_error(message);
        let _ = panic_hook(message.get(lead..).unwrap_or(message));
    }
    core::arch::wasm32::unreachable()
}

/// Tag name of the content script's host element (a valid custom-element name, so
/// `attachShadow` is allowed). Never listed, read or acted on by the tools.
pub const HOST_TAG: &str = "gemma-gem-host";
/// Tag name of the embeddable widget's element: in the `embedded` build the tools skip it like
/// [`HOST_TAG`].
pub const WIDGET_TAG: &str = "gemma-gem-widget";
#[cfg(not(feature = "embedded"))]
pub use panel::OVERLAY_PATH;

const LOG_PREFIX: &str = "[Gemma Gem]";

fn log_error(msg: &str) {
    web_sys::console::error_1(&JsValue::from_str(&format!("{LOG_PREFIX} {msg}")));
}

#[cfg_attr(feature = "embedded", allow(dead_code))]
fn log_debug(msg: &str) {
    if cfg!(feature = "dev-log") {
        web_sys::console::debug_1(&JsValue::from_str(&format!("{LOG_PREFIX} {msg}")));
    }
}

#[cfg(not(feature = "embedded"))]
/// The one server of this copy of the module (wasm here is single-threaded).
struct Global(RefCell<Option<server::Shared>>);
#[cfg(not(feature = "embedded"))]
// SAFETY: the content script runs on the page's main thread only; nothing here is shared with
// another thread (wasm32v1-none has no threads).
unsafe impl Sync for Global {}
#[cfg(not(feature = "embedded"))]
static SERVER: Global = Global(RefCell::new(None));

#[cfg(not(feature = "embedded"))]
fn current() -> Option<server::Shared> {
    SERVER.0.borrow().clone()
}

#[cfg(not(feature = "embedded"))]
/// Entry point, called by the loader `content.js` with its hooks (`later(callback)`: run the
/// callback in a later task, guarded against crashes).
#[wasm_bindgen]
pub fn start(host: JsValue) {
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
    let own_id = js::get_str(
        &js::get(&js::get(&js_sys::global(), "chrome"), "runtime"),
        "id",
    )
    .unwrap_or_default();
    *SERVER.0.borrow_mut() = Some(server::Server::new(panel, own_id, host));
}

#[cfg(not(feature = "embedded"))]
/// A message from `chrome.runtime.onMessage`. Returns `true` when the answer will come later
/// through `respond` (the call runs in slices), `false` when it was given already or when the
/// message is not ours.
#[wasm_bindgen]
pub fn on_message(message: JsValue, sender: JsValue, respond: JsValue) -> bool {
    match current() {
        Some(server) => server::on_message(&server, &message, &sender, &respond),
        None => false,
    }
}

#[cfg(not(feature = "embedded"))]
/// Answers a message that a crashed copy of this module had taken and not answered: a tool
/// call gets a clear tool error (the call may or may not have acted).
#[wasm_bindgen]
pub fn recover(message: JsValue, sender: JsValue, respond: JsValue) {
    if let Some(server) = current() {
        server::recover(&server, &message, &sender, &respond);
    }
}

#[cfg(not(feature = "embedded"))]
/// Tells the service worker that the previous copy of this module crashed (`detail`: its panic
/// message or error), so that it is logged there too.
#[wasm_bindgen]
pub fn report_crash(detail: &str) {
    log_error(&format!(
        "the page tools crashed and were restarted: {detail}"
    ));
    server::report_crash(detail);
}

#[cfg(not(feature = "embedded"))]
/// Memory of this copy of the module (wasm2js keeps it in one `ArrayBuffer`): for benches.
#[wasm_bindgen]
pub fn memory_bytes() -> f64 {
    #[cfg(target_arch = "wasm32")]
    {
        (core::arch::wasm32::memory_size(0) as f64) * 65536.0
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        0.0
    }
}
