//! The in-page host: `<gemma-gem-host>` with a **closed** shadow root holding the launcher and,
//! once opened, the overlay page in an iframe.
//!
//! - Open/close: the launcher, the keyboard command (service worker → [`Command`]), Escape
//!   (on the launcher here; inside the overlay the overlay asks the service worker, which sends
//!   [`Command::Close`] — the page never sees the overlay's key events). Opening moves the focus
//!   into the overlay; closing gives it back to the element of the page that had it before
//!   (or to the launcher), so keyboard users lose nothing.
//! - The launcher can be dragged (pointer) or moved with Alt+arrow keys to any corner of the
//!   viewport; the corner is remembered in `chrome.storage.local` ([`CORNER_KEY`]).
//! - A host the user turned Gemma Gem off on (`chrome.storage.local["disabled:HOST"]`, written by
//!   the service worker) gets no host element at all; the key is watched, so disabling or
//!   re-enabling a site applies at once, without a reload.
//! - The overlay iframe's URL carries a one-time token from the service worker (the overlay
//!   presents it, and only then is it answered). The host's style, attributes and place are
//!   kept as set here ([`crate::guard`]); when the page moved the host (which reloads the
//!   iframe with its used token), the iframe is replaced by one with a fresh token.
//! - When the extension is reloaded or updated, this copy's `chrome.runtime` goes away: the next
//!   interaction removes the host (and a newly injected copy replaces any host left behind).

use alloc::format;
use alloc::rc::Rc;
use alloc::string::{String, ToString};
use core::cell::RefCell;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use web_sys::{Document, Element, HtmlElement, ShadowRoot, ShadowRootInit, ShadowRootMode};

use crate::guard::{self, HostGuard};
use crate::{HOST_TAG, js};

/// Path of the overlay page inside the extension.
pub const OVERLAY_PATH: &str = "overlay/overlay.html";
/// `chrome.storage.local` key of the launcher's corner.
pub const CORNER_KEY: &str = "launcherCorner";
/// Distance of the host from the viewport's edges (CSS px).
const MARGIN: f64 = 16.0;
/// Size of the collapsed host (CSS px).
const COLLAPSED: f64 = 56.0;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = ["chrome", "runtime"], js_name = getURL)]
    fn runtime_get_url(path: &str) -> String;
}

/// A corner of the viewport (the one type the UI kit's launcher uses too).
pub use gg_vocab::Corner;
use gg_vocab::{CornerDrag, DragEnd};

/// The host's inline style. Inline `!important` declarations win over any `!important` rule of
/// the page's own style sheets, so hostile page CSS cannot hide, move or restyle the host.
/// `dragged_to`: the top-left point of the collapsed host while it is being dragged.
pub fn host_style(corner: Corner, open: bool, dragged_to: Option<(f64, f64)>) -> String {
    let place = match dragged_to {
        Some((x, y)) => format!("left: {x:.0}px !important; top: {y:.0}px !important;"),
        None => {
            let v = if corner.top() { "top" } else { "bottom" };
            let h = if corner.left() { "left" } else { "right" };
            format!("{v}: {MARGIN}px !important; {h}: {MARGIN}px !important;")
        }
    };
    let size = if open && dragged_to.is_none() {
        "width: min(420px, calc(100vw - 32px)) !important; height: min(640px, calc(100vh - 32px)) !important;"
            .to_string()
    } else {
        format!("width: {COLLAPSED}px !important; height: {COLLAPSED}px !important;")
    };
    format!(
        "all: initial !important; display: block !important; position: fixed !important; {place} {size} \
         z-index: 2147483647 !important; margin: 0 !important; padding: 0 !important; border: 0 !important; \
         background: transparent !important; visibility: visible !important; opacity: 1 !important; \
         transform: none !important; pointer-events: auto !important; contain: strict !important;"
    )
}

/// Styles inside the shadow root; the page's style sheets cannot reach them.
///
/// Nothing may paint over the panel iframe, not even the launcher's shadow: the approval buttons
/// inside it arm only while the frame is unobscured (Intersection Observer v2, see
/// `gg_components::arming`), and Chromium counts any visual overlap of the frame's rectangle as
/// occlusion. The launcher is 48 px at 4 px from the edge; its shadow reaches 3 + 10 px past it
/// and its drag scale (1.1) another 2.4 px, so 72 px are kept free for it (8 px to spare).
const SHADOW_CSS: &str = ":host { all: initial; }\n\
    .gg { all: initial; display: block; position: absolute; inset: 0; }\n\
    .launcher { all: initial; box-sizing: border-box; position: absolute; width: 48px; height: 48px; \
      border-radius: 50%; cursor: pointer; display: flex; align-items: center; justify-content: center; \
      background: linear-gradient(135deg, #6d5dfc 0%, #3ab0ff 100%); color: #fff; font: 600 20px/1 system-ui, sans-serif; \
      box-shadow: 0 3px 10px rgba(0, 0, 0, .28); transition: transform .15s ease; touch-action: none; user-select: none; }\n\
    .gg[data-corner$=right] .launcher { right: 4px; }\n\
    .gg[data-corner$=left] .launcher { left: 4px; }\n\
    .gg[data-corner^=bottom] .launcher { bottom: 4px; }\n\
    .gg[data-corner^=top] .launcher { top: 4px; }\n\
    .launcher:hover { transform: scale(1.06); }\n\
    .gg[data-dragging] .launcher { cursor: grabbing; transform: scale(1.1); }\n\
    .launcher:focus-visible { outline: 3px solid #ffbf47; outline-offset: 2px; }\n\
    .panel { all: initial; display: block; position: absolute; left: 0; width: 100%; height: calc(100% - 72px); \
      border: 0; border-radius: 14px; box-shadow: 0 12px 40px rgba(0, 0, 0, .3); background: #fff; }\n\
    .gg[data-corner^=bottom] .panel { top: 0; }\n\
    .gg[data-corner^=top] .panel { bottom: 0; }\n\
    .panel[hidden] { display: none; }\n\
    @media (prefers-reduced-motion: reduce) { .launcher { transition: none; } }\n";

/// What the service worker may ask of the panel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Toggle,
    Close,
}

impl Command {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "toggle" => Some(Self::Toggle),
            "close" => Some(Self::Close),
            _ => None,
        }
    }
}

struct Mounted {
    host: HtmlElement,
    wrap: Element,
    button: HtmlElement,
    frame: Option<HtmlElement>,
    open: bool,
    /// The page element that had the focus when the panel opened.
    return_focus: Option<HtmlElement>,
    press: Option<CornerDrag>,
    /// A drag just ended: the click that follows it is not a toggle.
    swallow_click: bool,
    /// Restores the host's style and attributes when the page changes them.
    guard: HostGuard,
    /// A token for a new overlay iframe was asked for.
    token_pending: bool,
}

/// The host's state, shared by its event listeners.
pub struct Panel {
    document: Document,
    corner: Corner,
    disabled: bool,
    mounted: Option<Mounted>,
}

pub type Shared = Rc<RefCell<Panel>>;

fn log_error(msg: &str) {
    crate::log_error(msg);
}

/// `chrome.runtime.id` is gone once the extension was reloaded, updated or removed.
fn extension_alive() -> bool {
    let runtime = js::get(&js::get(&js_sys::global(), "chrome"), "runtime");
    !runtime.is_undefined() && js::get_str(&runtime, "id").is_some()
}

fn storage_area(area: &str) -> JsValue {
    js::get(
        &js::get(&js::get(&js_sys::global(), "chrome"), "storage"),
        area,
    )
}

/// `chrome.storage[area].get(key)`, then `f(value)` (`undefined` when absent or unreadable).
fn storage_get(area: &str, key: &str, f: impl FnOnce(JsValue) + 'static) {
    let promise = js::call(&storage_area(area), "get", &[JsValue::from_str(key)]);
    let key = key.to_string();
    match promise {
        Ok(promise) => {
            let f = Rc::new(RefCell::new(Some(f)));
            let g = f.clone();
            let ok = Closure::once_into_js(move |items: JsValue| {
                if let Some(f) = f.borrow_mut().take() {
                    f(js::get(&items, &key));
                }
            });
            let err = Closure::once_into_js(move |e: JsValue| {
                log_error(&format!("could not read chrome.storage: {e:?}"));
                if let Some(f) = g.borrow_mut().take() {
                    f(JsValue::UNDEFINED);
                }
            });
            if js::call(&promise, "then", &[ok, err]).is_err() {
                log_error("chrome.storage did not return a promise");
            }
        }
        Err(e) => {
            log_error(&format!("could not read chrome.storage: {e:?}"));
            f(JsValue::UNDEFINED);
        }
    }
}

fn storage_set(area: &str, key: &str, value: JsValue) {
    let items = js::Obj::new().v(key, value).js();
    if let Ok(promise) = js::call(&storage_area(area), "set", &[items]) {
        let err = Closure::once_into_js(move |e: JsValue| {
            log_error(&format!("could not save to chrome.storage: {e:?}"));
        });
        let _ = js::call(&promise, "catch", &[err]);
    }
}

/// The `chrome.storage.local` key that turns Gemma Gem off on `hostname` (`gg_vocab::disabled_key`,
/// the key the service worker writes); a page without a host reads the bare prefix, which nothing
/// writes.
pub fn disabled_key(hostname: &str) -> String {
    gg_vocab::disabled_key(hostname).unwrap_or_else(|| gg_vocab::DISABLED_PREFIX.into())
}

/// Whether a stored value of the [`disabled_key`] turns Gemma Gem off.
fn disabled_by(value: &JsValue) -> bool {
    value.as_bool() == Some(true)
}

/// Starts the host on this page: reads the corner and the disabled hosts, mounts unless this
/// site is disabled, and follows later changes of both.
pub fn start() -> Result<Shared, JsValue> {
    let window = web_sys::window().ok_or("no window")?;
    let document = window.document().ok_or("no document")?;
    // A previous copy of this script (before an extension reload) leaves its host behind.
    if let Some(old) = document.query_selector(HOST_TAG)? {
        old.remove();
    }
    let panel: Shared = Rc::new(RefCell::new(Panel {
        document,
        corner: Corner::default(),
        disabled: false,
        mounted: None,
    }));
    let hostname = window.location().hostname().unwrap_or_default();
    {
        let panel = panel.clone();
        storage_get("local", CORNER_KEY, move |corner| {
            let corner = corner
                .as_string()
                .and_then(|c| Corner::from_name(&c))
                .unwrap_or_default();
            let panel2 = panel.clone();
            storage_get("local", &disabled_key(&hostname), move |value| {
                let mut p = panel2.borrow_mut();
                p.corner = corner;
                p.disabled = disabled_by(&value);
                if !p.disabled {
                    drop(p);
                    mount(&panel2);
                }
            });
        });
    }
    watch_storage(&panel)?;
    Ok(panel)
}

/// `chrome.storage.onChanged`: this host's disabled key and the corner (both local) apply live,
/// in every tab.
fn watch_storage(panel: &Shared) -> Result<(), JsValue> {
    let hostname = web_sys::window()
        .and_then(|w| w.location().hostname().ok())
        .unwrap_or_default();
    let panel = panel.clone();
    let listener =
        Closure::<dyn FnMut(JsValue, JsValue)>::new(move |changes: JsValue, area: JsValue| {
            let area = area.as_string().unwrap_or_default();
            if area != "local" {
                return;
            }
            let change = js::get(&changes, &disabled_key(&hostname));
            if !change.is_undefined() {
                let disabled = disabled_by(&js::get(&change, "newValue"));
                let was = core::mem::replace(&mut panel.borrow_mut().disabled, disabled);
                if disabled && !was {
                    unmount(&panel);
                } else if !disabled && was {
                    mount(&panel);
                }
            }
            let change = js::get(&changes, CORNER_KEY);
            if let Some(corner) =
                js::get_str(&change, "newValue").and_then(|c| Corner::from_name(&c))
            {
                set_corner(&panel, corner, false);
            }
        });
    let on_changed = js::get(&storage_area_root(), "onChanged");
    js::call(&on_changed, "addListener", &[listener.as_ref().clone()])?;
    // The listener lives as long as the page.
    listener.forget();
    Ok(())
}

fn storage_area_root() -> JsValue {
    js::get(&js::get(&js_sys::global(), "chrome"), "storage")
}

/// Whether the settings turn Gemma Gem off on this page (then no page tool runs either).
pub fn is_disabled(panel: &Shared) -> bool {
    panel.try_borrow().map_or(true, |p| p.disabled)
}

fn create(document: &Document, tag: &str) -> Result<Element, JsValue> {
    document.create_element(tag)
}

fn mount(panel: &Shared) {
    if let Err(e) = try_mount(panel) {
        log_error(&format!("could not mount the launcher: {e:?}"));
    }
}

fn try_mount(panel: &Shared) -> Result<(), JsValue> {
    let mut p = panel.borrow_mut();
    if p.mounted.is_some() || p.disabled {
        return Ok(());
    }
    let document = p.document.clone();
    let host: HtmlElement = create(&document, HOST_TAG)?.dyn_into()?;
    host.set_attribute("style", &host_style(p.corner, false, None))?;
    host.set_attribute("data-gemma-gem", "")?;
    let root: ShadowRoot = host.attach_shadow(&ShadowRootInit::new(ShadowRootMode::Closed))?;

    let style = create(&document, "style")?;
    style.set_text_content(Some(SHADOW_CSS));
    root.append_child(&style)?;
    let wrap = create(&document, "div")?;
    wrap.set_class_name("gg");
    wrap.set_attribute("data-corner", p.corner.name())?;
    root.append_child(&wrap)?;

    let button: HtmlElement = create(&document, "button")?.dyn_into()?;
    button.set_class_name("launcher");
    button.set_attribute("type", "button")?;
    button.set_attribute("data-testid", "gg-launcher")?;
    button.set_attribute("data-status", "idle")?;
    button.set_attribute("data-corner", p.corner.name())?;
    button.set_attribute("aria-label", "Open Gemma Gem")?;
    button.set_attribute("aria-expanded", "false")?;
    button.set_attribute(
        "title",
        "Gemma Gem — drag or Alt+arrow keys to move to another corner",
    )?;
    button.set_text_content(Some("\u{25C6}"));
    wrap.append_child(&button)?;

    listen(panel, &button, "click", |panel, _| on_click(panel))?;
    listen(panel, &button, "keydown", on_key)?;
    listen(panel, &button, "pointerdown", on_pointer_down)?;
    listen(panel, &button, "pointermove", on_pointer_move)?;
    listen(panel, &button, "pointerup", |panel, e| {
        on_pointer_end(panel, e, true)
    })?;
    listen(panel, &button, "pointercancel", |panel, e| {
        on_pointer_end(panel, e, false)
    })?;

    let parent = document.document_element().ok_or("no document element")?;
    parent.append_child(&host)?;
    let moved = {
        let weak = Rc::downgrade(panel);
        move || {
            if let Some(panel) = weak.upgrade() {
                replace_frame(&panel);
            }
        }
    };
    let guard = HostGuard::start(&document, &host, &host_style(p.corner, false, None), moved)?;
    p.mounted = Some(Mounted {
        host,
        wrap,
        button,
        frame: None,
        open: false,
        return_focus: None,
        press: None,
        swallow_click: false,
        guard,
        token_pending: false,
    });
    crate::log_debug("launcher mounted");
    Ok(())
}

/// Adds an event listener that gets the shared state. The listener lives as long as the element
/// (it is never invoked after the element is removed, so it is never freed while running).
fn listen(
    panel: &Shared,
    target: &HtmlElement,
    kind: &str,
    f: impl Fn(&Shared, web_sys::Event) + 'static,
) -> Result<(), JsValue> {
    let panel = panel.clone();
    let closure = Closure::<dyn FnMut(web_sys::Event)>::new(move |e: web_sys::Event| {
        if !extension_alive() {
            // The extension was reloaded or removed: leave the page as we found it.
            unmount(&panel);
            return;
        }
        f(&panel, e)
    });
    target.add_event_listener_with_callback(kind, closure.as_ref().unchecked_ref())?;
    closure.forget();
    Ok(())
}

fn unmount(panel: &Shared) {
    let mounted = panel.borrow_mut().mounted.take();
    if let Some(m) = mounted {
        let had_focus = m.open;
        m.guard.stop();
        m.host.remove();
        if had_focus && let Some(el) = m.return_focus.filter(|el| el.is_connected()) {
            let _ = el.focus();
        }
        crate::log_debug("launcher removed");
    }
}

fn on_click(panel: &Shared) {
    {
        let mut p = panel.borrow_mut();
        if let Some(m) = p.mounted.as_mut()
            && core::mem::take(&mut m.swallow_click)
        {
            return;
        }
    }
    if let Err(e) = run(panel, Command::Toggle) {
        log_error(&format!("could not open the panel: {e:?}"));
    }
}

fn on_key(panel: &Shared, e: web_sys::Event) {
    let Some(e) = e.dyn_ref::<web_sys::KeyboardEvent>() else {
        return;
    };
    let key = e.key();
    if key == "Escape" {
        let open = panel.borrow().mounted.as_ref().is_some_and(|m| m.open);
        if open {
            e.prevent_default();
            let _ = run(panel, Command::Close);
        }
        return;
    }
    if e.alt_key() && !e.ctrl_key() && !e.meta_key() {
        let corner = panel.borrow().corner;
        if let Some(next) = corner.after_key(&key) {
            e.prevent_default();
            if next != corner {
                set_corner(panel, next, true);
            }
        }
    }
}

fn pointer(e: &web_sys::Event) -> Option<&web_sys::PointerEvent> {
    e.dyn_ref::<web_sys::PointerEvent>()
}

fn on_pointer_down(panel: &Shared, e: web_sys::Event) {
    let Some(e) = pointer(&e) else { return };
    if e.button() != 0 {
        return;
    }
    let mut p = panel.borrow_mut();
    let document = p.document.clone();
    let Some(m) = p.mounted.as_mut() else { return };
    // The panel's place follows the launcher; it moves while the panel is closed.
    if m.open {
        return;
    }
    // Pressing the launcher is about to take the focus: remember who had it.
    if let Some(el) = page_focus(&document, &m.host) {
        m.return_focus = Some(el);
    }
    let _ = m.button.set_pointer_capture(e.pointer_id());
    m.press = Some(CornerDrag::press(
        e.pointer_id(),
        f64::from(e.client_x()),
        f64::from(e.client_y()),
    ));
}

fn on_pointer_move(panel: &Shared, e: web_sys::Event) {
    let Some(e) = pointer(&e) else { return };
    let mut p = panel.borrow_mut();
    let corner = p.corner;
    let Some(m) = p.mounted.as_mut() else { return };
    let Some(press) = m.press.as_mut() else {
        return;
    };
    let (x, y) = (f64::from(e.client_x()), f64::from(e.client_y()));
    if !press.move_to(e.pointer_id(), x, y) || !press.dragging() {
        return;
    }
    let _ = m.wrap.set_attribute("data-dragging", "");
    let (w, h) = viewport();
    let half = COLLAPSED / 2.0;
    let left = (x - half).clamp(0.0, (w - COLLAPSED).max(0.0));
    let top = (y - half).clamp(0.0, (h - COLLAPSED).max(0.0));
    m.guard
        .set_style(&m.host, &host_style(corner, false, Some((left, top))));
}

fn on_pointer_end(panel: &Shared, e: web_sys::Event, commit: bool) {
    let Some(e) = pointer(&e) else { return };
    let target = {
        let mut p = panel.borrow_mut();
        let corner = p.corner;
        let Some(m) = p.mounted.as_mut() else { return };
        let Some(press) = m
            .press
            .take()
            .filter(|press| press.pointer() == e.pointer_id())
        else {
            return;
        };
        let _ = m.button.release_pointer_capture(e.pointer_id());
        if !press.dragging() {
            return;
        }
        let _ = m.wrap.remove_attribute("data-dragging");
        m.swallow_click = commit;
        let (w, h) = viewport();
        let (x, y) = (f64::from(e.client_x()), f64::from(e.client_y()));
        let next = match press.release(x, y, w, h, corner) {
            DragEnd::Dropped(c) if commit => c,
            _ => corner,
        };
        m.guard.set_style(&m.host, &host_style(next, false, None));
        next
    };
    if commit {
        set_corner(panel, target, true);
    }
}

fn viewport() -> (f64, f64) {
    let window = web_sys::window();
    let size = |v: Option<Result<JsValue, JsValue>>| {
        v.and_then(|r| r.ok())
            .and_then(|v| v.as_f64())
            .unwrap_or(0.0)
    };
    (
        size(window.as_ref().map(|w| w.inner_width())),
        size(window.as_ref().map(|w| w.inner_height())),
    )
}

/// Moves the launcher (and the panel) to `corner`; `save`: remember it for every page.
fn set_corner(panel: &Shared, corner: Corner, save: bool) {
    let mut p = panel.borrow_mut();
    p.corner = corner;
    if let Some(m) = p.mounted.as_ref() {
        let _ = m.wrap.set_attribute("data-corner", corner.name());
        let _ = m.button.set_attribute("data-corner", corner.name());
        m.guard
            .set_style(&m.host, &host_style(corner, m.open, None));
    }
    drop(p);
    if save {
        storage_set("local", CORNER_KEY, JsValue::from_str(corner.name()));
    }
}

/// Opens or closes the panel (the overlay page in an iframe, created on first use).
pub fn run(panel: &Shared, command: Command) -> Result<(), JsValue> {
    let mut p = panel.borrow_mut();
    let corner = p.corner;
    let document = p.document.clone();
    let Some(m) = p.mounted.as_mut() else {
        return Ok(());
    };
    let open = match command {
        Command::Toggle => !m.open,
        Command::Close if !m.open => return Ok(()),
        Command::Close => false,
    };
    // The iframe comes once the service worker gave its token (see `attach_frame`).
    let frame = m.frame.clone();
    let need_frame = frame.is_none() && !m.token_pending;
    m.token_pending |= need_frame;
    m.open = open;
    m.press = None;
    if open {
        // Opened from the page (keyboard command) or from the launcher (whose press already
        // recorded the page's focus).
        if let Some(el) = page_focus(&document, &m.host) {
            m.return_focus = Some(el);
        }
        if let Some(frame) = &frame {
            frame.remove_attribute("hidden")?;
        }
    } else if let Some(frame) = &frame {
        frame.set_attribute("hidden", "")?;
    }
    m.guard.set_style(&m.host, &host_style(corner, open, None));
    m.button
        .set_attribute("aria-expanded", if open { "true" } else { "false" })?;
    m.button.set_attribute(
        "aria-label",
        if open {
            "Close Gemma Gem"
        } else {
            "Open Gemma Gem"
        },
    )?;
    if open {
        // Into the overlay (its page puts the focus on the message box).
        if let Some(frame) = &frame {
            focus_frame(frame);
        }
    } else {
        match m.return_focus.take().filter(|el| el.is_connected()) {
            Some(el) => el.focus()?,
            None => m.button.focus()?,
        }
    }
    drop(p);
    if need_frame {
        request_frame(panel);
    }
    Ok(())
}

/// Asks the service worker for a one-time token, then creates the overlay iframe with it.
fn request_frame(panel: &Shared) {
    let weak = Rc::downgrade(panel);
    guard::request_token(move |token| {
        let Some(panel) = weak.upgrade() else { return };
        let result = match token {
            Ok(token) => attach_frame(&panel, &token),
            Err(e) => Err(JsValue::from_str(&e)),
        };
        if let Err(e) = result {
            if let Ok(mut p) = panel.try_borrow_mut()
                && let Some(m) = p.mounted.as_mut()
            {
                m.token_pending = false;
            }
            log_error(&format!("could not open the panel: {e:?}"));
        }
    });
}

/// Creates the overlay iframe (its URL carries `token`), shown if the panel is open.
fn attach_frame(panel: &Shared, token: &str) -> Result<(), JsValue> {
    let mut p = panel.borrow_mut();
    let document = p.document.clone();
    let Some(m) = p.mounted.as_mut() else {
        return Ok(());
    };
    m.token_pending = false;
    if m.frame.is_some() {
        return Ok(());
    }
    let frame: HtmlElement = create(&document, "iframe")?.dyn_into()?;
    frame.set_class_name("panel");
    frame.set_attribute("data-testid", "gg-panel-frame")?;
    frame.set_attribute("title", "Gemma Gem")?;
    if !m.open {
        frame.set_attribute("hidden", "")?;
    }
    frame.set_attribute(
        "src",
        &guard::frame_url(&runtime_get_url(OVERLAY_PATH), token),
    )?;
    // The first opening focuses the frame before its page has loaded: focus it again once
    // loaded, if the panel is still open. The overlay never navigates itself, so a second
    // load of the same iframe means someone else navigated it (a page can reach the frame
    // through `window.frames` and set its location to a look-alike of the overlay): the
    // iframe is replaced by a fresh one with a new token.
    let weak = Rc::downgrade(panel);
    let loads = Rc::new(core::cell::Cell::new(0u32));
    let on_load = Closure::<dyn FnMut(web_sys::Event)>::new(move |e: web_sys::Event| {
        let Some(panel) = weak.upgrade() else { return };
        loads.set(loads.get() + 1);
        // Only the iframe in place now (a replaced one is gone from the page).
        let loaded = e.current_target().map(JsValue::from);
        let current = panel.try_borrow().ok().is_some_and(|p| {
            p.mounted
                .as_ref()
                .and_then(|m| m.frame.as_ref())
                .is_some_and(|f| Some(JsValue::from(f.clone())) == loaded)
        });
        if !current {
            return;
        }
        if loads.get() > 1 {
            log_error("the overlay frame was navigated by someone else; replaced with a fresh one");
            replace_frame(&panel);
            return;
        }
        if let Ok(p) = panel.try_borrow()
            && let Some(m) = p.mounted.as_ref().filter(|m| m.open)
            && let Some(frame) = m.frame.as_ref()
        {
            focus_frame(frame);
        }
    });
    frame.add_event_listener_with_callback("load", on_load.as_ref().unchecked_ref())?;
    on_load.forget();
    m.wrap.insert_before(&frame, Some(&m.button))?;
    m.frame = Some(frame.clone());
    if m.open {
        focus_frame(&frame);
    }
    Ok(())
}

/// Drops the overlay iframe and opens a new one with a fresh token (the page moved the host,
/// which reloaded the iframe with its used token).
fn replace_frame(panel: &Shared) {
    let Ok(mut p) = panel.try_borrow_mut() else {
        return;
    };
    let Some(m) = p.mounted.as_mut() else { return };
    let Some(old) = m.frame.take() else {
        // No iframe yet (or one is on its way): nothing to replace.
        return;
    };
    old.remove();
    if m.token_pending {
        return;
    }
    m.token_pending = true;
    drop(p);
    request_frame(panel);
}

/// The page element that has the focus, unless it is the body or our own host.
fn page_focus(document: &Document, host: &HtmlElement) -> Option<HtmlElement> {
    document
        .active_element()
        .filter(|el| el != host.as_ref() && el.tag_name() != "BODY")
        .and_then(|el| el.dyn_into::<HtmlElement>().ok())
}

/// Gives the focus to the overlay's window (the iframe is cross-origin: its window's `focus()`
/// is one of the few things the page side may call on it).
fn focus_frame(frame: &HtmlElement) {
    let _ = frame.focus();
    if let Some(window) = frame
        .dyn_ref::<web_sys::HtmlIFrameElement>()
        .and_then(|f| f.content_window())
    {
        let _ = window.focus();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_keys_are_the_service_workers() {
        // gg_messages::storage::disabled_key writes these for the same hosts.
        assert_eq!(disabled_key("example.com"), "disabled:example.com");
        assert_eq!(disabled_key("Example.COM."), "disabled:example.com");
        assert_eq!(disabled_key("127.0.0.1"), "disabled:127.0.0.1");
        assert_eq!(disabled_key("[::1]"), "disabled:[::1]");
    }

    #[test]
    fn host_styles() {
        let s = host_style(Corner::TopLeft, false, None);
        assert!(
            s.contains("top: 16px !important; left: 16px !important;"),
            "{s}"
        );
        assert!(s.contains("width: 56px"), "{s}");
        let s = host_style(Corner::BottomRight, true, None);
        assert!(
            s.contains("bottom: 16px !important; right: 16px !important;"),
            "{s}"
        );
        assert!(s.contains("width: min(420px"), "{s}");
        let s = host_style(Corner::BottomRight, false, Some((100.4, 20.0)));
        assert!(
            s.contains("left: 100px !important; top: 20px !important;"),
            "{s}"
        );
        assert!(!s.contains("bottom:"), "{s}");
        assert!(s.contains("z-index: 2147483647"));
    }
}
