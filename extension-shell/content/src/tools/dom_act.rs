//! What the element tools share: the usable check, scrolling into view, the viewport, event
//! dispatch and focus.

use alloc::format;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{Element, Event};

use super::{Target, ToolErr};
use crate::dom;
use crate::js::{self, Obj};

/// Fails for an element that cannot be acted on: hidden or disabled.
pub(super) fn check_usable(target: &Target, el: &Element) -> Result<(), ToolErr> {
    if !dom::attached(el) {
        return Err(ToolErr::stale_ref(format!(
            "{} is no longer in the page; call snapshot_page again",
            target.subject(el)
        )));
    }
    if let Some(reason) = dom::hidden_reason(el) {
        return Err(ToolErr::not_interactable(format!(
            "{} cannot be used: {reason}. Call snapshot_page to find a visible element",
            target.subject(el)
        )));
    }
    if dom::is_disabled(el) {
        return Err(ToolErr::not_interactable(format!(
            "{} is disabled; it cannot be used until the page enables it",
            target.subject(el)
        )));
    }
    Ok(())
}

pub(super) fn scroll_into_view(el: &Element, block: &str) {
    let options = Obj::new()
        .s("block", block)
        .s("inline", "nearest")
        .s("behavior", "instant")
        .js();
    let _ = js::call(el, "scrollIntoView", &[options]);
}

pub(super) fn viewport(el: &Element) -> (f64, f64) {
    let Some(win) = dom::window_of(el) else {
        return (0.0, 0.0);
    };
    let get = |v: Result<JsValue, JsValue>| v.ok().and_then(|v| v.as_f64()).unwrap_or(0.0);
    (get(win.inner_width()), get(win.inner_height()))
}

pub(super) fn dispatch(el: &Element, ctor: &str, kind: &str, init: &Obj) -> bool {
    let Ok(event) = js::construct(ctor, &[JsValue::from_str(kind), init.0.clone().into()]) else {
        return true;
    };
    el.dispatch_event(event.unchecked_ref::<Event>())
        .unwrap_or(true)
}

pub(super) fn focus(el: &Element) {
    let _ = js::call(el, "focus", &[Obj::new().b("preventScroll", true).js()]);
}
