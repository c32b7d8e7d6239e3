//! `scroll_page`: an element (by ref) into view, or the page (or the scrollable box at the
//! viewport's centre) by a direction and amount.

use alloc::format;
use alloc::string::String;
use wasm_bindgen::JsValue;
use web_sys::{Document, Element, Node};

use super::dom_act::{scroll_into_view, viewport};
use super::{State, Target, ToolErr};
use crate::dom;
use crate::js::{self, Obj};
use crate::scope::Scope;

/// `scroll_page`: to the element of `ref` when there is one, else by `direction` and `amount`.
pub(super) fn scroll_page(
    state: &State,
    doc: &Document,
    args: &JsValue,
) -> Result<JsValue, ToolErr> {
    if let Some(r) = js::get_str(args, "ref").filter(|r| !r.trim().is_empty()) {
        let target = Target::Ref(String::from(r.trim()));
        let el = state.resolve_ref(r.trim())?;
        scroll_to(&target, &el)
    } else {
        scroll_by(doc, &state.scope, args)
    }
}

fn scroll_to(target: &Target, el: &Element) -> Result<JsValue, ToolErr> {
    if dom::hidden_reason(el).is_some() {
        return Err(ToolErr::not_interactable(format!(
            "{} is hidden, so it cannot be scrolled into view",
            target.subject(el)
        )));
    }
    scroll_into_view(el, "center");
    let rect = el.get_bounding_client_rect();
    let (vw, vh) = viewport(el);
    let in_view = rect.bottom() > 0.0 && rect.right() > 0.0 && rect.top() < vh && rect.left() < vw;
    Ok(Obj::new()
        .s("scrolled_to", &dom::describe(el))
        .b("in_view", in_view)
        .js())
}

#[inline(never)]
fn scroll_by(doc: &Document, scope: &Scope, args: &JsValue) -> Result<JsValue, ToolErr> {
    let direction = js::get_str(args, "direction")
        .ok_or_else(|| {
            ToolErr::invalid_arguments("give a `direction` (up, down, left, right) or a `ref`")
        })?
        .to_ascii_lowercase();
    let win = doc
        .default_view()
        .ok_or_else(|| ToolErr::unavailable("the page has no window"))?;
    let get = |v: Result<JsValue, JsValue>| v.ok().and_then(|v| v.as_f64()).unwrap_or(0.0);
    let (vw, vh) = (get(win.inner_width()), get(win.inner_height()));
    let vertical = direction == "up" || direction == "down";
    let default = if vertical { vh } else { vw } * 0.8;
    let amount = match js::get_f64(args, "amount") {
        Some(a) if a.is_finite() && a > 0.0 => a,
        _ => default,
    };
    let (dx, dy) = match direction.as_str() {
        "up" => (0.0, -amount),
        "down" => (0.0, amount),
        "left" => (-amount, 0.0),
        "right" => (amount, 0.0),
        _ => {
            return Err(ToolErr::invalid_arguments(
                "`direction` must be up, down, left or right",
            ));
        }
    };
    let position = |w: &web_sys::Window| (w.scroll_x().unwrap_or(0.0), w.scroll_y().unwrap_or(0.0));
    let before = position(&win);
    let options = Obj::new()
        .n("left", dx)
        .n("top", dy)
        .s("behavior", "instant")
        .js();
    let _ = js::call(&win, "scrollBy", core::slice::from_ref(&options));
    let after = position(&win);
    let mut moved = (after.0 - before.0, after.1 - before.1);
    let mut container = None;
    if moved == (0.0, 0.0) {
        // The window does not scroll that way: scroll the scrollable box at the viewport's
        // centre (apps often scroll an inner element).
        if let Some(el) = scrollable_at_centre(doc, scope, vw, vh, vertical) {
            let start = (px(el.scroll_left()), px(el.scroll_top()));
            let _ = js::call(&el, "scrollBy", &[options]);
            moved = (
                px(el.scroll_left()) - start.0,
                px(el.scroll_top()) - start.1,
            );
            container = Some(el);
        }
    }
    let root = doc.scrolling_element().or_else(|| doc.document_element());
    let (page_w, page_h) = root.map_or((0, 0), |r| (r.scroll_width(), r.scroll_height()));
    let pos = position(&win);
    let mut out = Obj::new()
        .s("direction", &direction)
        .n("moved_x", moved.0)
        .n("moved_y", moved.1)
        .n("scroll_x", pos.0)
        .n("scroll_y", pos.1)
        .n("page_width", f64::from(page_w))
        .n("page_height", f64::from(page_h))
        .n("viewport_width", vw)
        .n("viewport_height", vh);
    if let Some(el) = &container {
        out = out.s("scrolled_element", &dom::describe(el));
    }
    if moved == (0.0, 0.0) {
        out = out.s(
            "note",
            &format!("nothing moved: the page cannot scroll further {direction}"),
        );
    }
    Ok(out.js())
}

/// A scroll position in pixels: `i32` in web-sys's stable API (the content script's build),
/// `f64` with `web_sys_unstable_apis` (the workspace's `wasm32-unknown-unknown` builds).
fn px(v: impl Into<f64>) -> f64 {
    v.into()
}

/// The scrollable box at the viewport's centre (or around it) that can scroll that way; with
/// a scope, only a box inside the scope (or the scope's element itself).
fn scrollable_at_centre(
    doc: &Document,
    scope: &Scope,
    vw: f64,
    vh: f64,
    vertical: bool,
) -> Option<Element> {
    let hit = dom::deep_element_from_point(doc, (vw / 2.0) as f32, (vh / 2.0) as f32);
    let start: Option<Node> = match (hit, scope.root()) {
        (Some(hit), _) if scope.refuses(&hit).is_none() => Some(hit.into()),
        // The centre is outside the scope: the scope's own box, if it scrolls.
        (_, Some(root)) => Some(root.clone().into()),
        (hit, None) => Some(hit?.into()),
    };
    let mut current = start;
    while let Some(node) = current {
        if let Some(el) = dom::as_element(&node)
            && !dom::is_own_host(&el)
            && scope.refuses(&el).is_none()
        {
            let (size, client) = if vertical {
                (el.scroll_height(), el.client_height())
            } else {
                (el.scroll_width(), el.client_width())
            };
            if size > client
                && let Some(style) = dom::computed_style(&el)
            {
                let overflow =
                    dom::style_prop(&style, if vertical { "overflow-y" } else { "overflow-x" });
                if matches!(overflow.as_str(), "auto" | "scroll" | "overlay") {
                    return Some(el);
                }
            }
        }
        current = dom::composed_parent(&node);
    }
    None
}
