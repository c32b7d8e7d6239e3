//! `click_element`: hit testing at the element's centre (through frames), then the pointer and
//! mouse events of a real click.

use alloc::format;
use alloc::string::String;
use wasm_bindgen::JsValue;
use web_sys::Element;

use super::dom_act::{check_usable, dispatch, focus, scroll_into_view, viewport};
use super::{Target, ToolErr};
use crate::dom;
use crate::js::{self, Obj};
use crate::text::clip;

/// `hit` is `el`, inside it, or a `<label>` of it.
fn hit_is_target(el: &Element, hit: &Element) -> bool {
    if dom::composed_contains(el, hit) {
        return true;
    }
    hit.closest("label")
        .ok()
        .flatten()
        .is_some_and(|label| js::get(&label, "control") == JsValue::from(el.clone()))
}

#[inline(never)]
pub(super) fn click(target: &Target, el: &Element) -> Result<JsValue, ToolErr> {
    check_usable(target, el)?;
    scroll_into_view(el, "center");
    let rect = el.get_bounding_client_rect();
    let (vw, vh) = viewport(el);
    let (left, right) = (rect.left().max(0.0), rect.right().min(vw));
    let (top, bottom) = (rect.top().max(0.0), rect.bottom().min(vh));
    if right <= left || bottom <= top {
        return Err(ToolErr::not_interactable(format!(
            "{} is outside the visible area even after scrolling",
            target.subject(el)
        )));
    }
    let (x, y) = ((left + right) / 2.0, (top + bottom) / 2.0);
    // Hit-test at the click point, in the element's document and in every frame around it.
    let (mut node, mut px, mut py) = (el.clone(), x, y);
    loop {
        let Some(doc) = node.owner_document() else {
            break;
        };
        let hit = dom::deep_element_from_point(&doc, px as f32, py as f32);
        match hit {
            Some(hit) if hit_is_target(&node, &hit) => {}
            Some(hit) => {
                let by = if dom::is_own_host(&hit) {
                    String::from("the Gemma Gem panel")
                } else {
                    format!("another element (<{}>)", clip(&dom::tag(&hit), 24))
                };
                return Err(ToolErr::not_interactable(format!(
                    "{} is covered by {by} at its centre; close or move what covers it (a \
                     dialog, banner or overlay) first, or scroll",
                    target.subject(el)
                )));
            }
            None => {
                return Err(ToolErr::not_interactable(format!(
                    "{} is not at a clickable point of the page",
                    target.subject(el)
                )));
            }
        }
        let frame = doc
            .default_view()
            .and_then(|w| w.frame_element().ok().flatten());
        let Some(frame) = frame else {
            break;
        };
        let r = frame.get_bounding_client_rect();
        px += r.left() + f64::from(frame.client_left());
        py += r.top() + f64::from(frame.client_top());
        node = frame;
    }

    let view: JsValue = dom::window_of(el).map_or(JsValue::NULL, Into::into);
    let init = |bubbles: bool, buttons: f64| {
        Obj::new()
            .b("bubbles", bubbles)
            .b("cancelable", bubbles)
            .b("composed", true)
            .v("view", view.clone())
            .n("clientX", x)
            .n("clientY", y)
            .n("screenX", x)
            .n("screenY", y)
            .n("button", 0.0)
            .n("buttons", buttons)
            .n("detail", 1.0)
            .n("pointerId", 1.0)
            .s("pointerType", "mouse")
            .b("isPrimary", true)
    };
    let (pe, me) = ("PointerEvent", "MouseEvent");
    dispatch(el, pe, "pointerover", &init(true, 0.0));
    dispatch(el, pe, "pointerenter", &init(false, 0.0));
    dispatch(el, me, "mouseover", &init(true, 0.0));
    dispatch(el, me, "mouseenter", &init(false, 0.0));
    dispatch(el, pe, "pointermove", &init(true, 0.0));
    dispatch(el, me, "mousemove", &init(true, 0.0));
    let pointer_down = dispatch(el, pe, "pointerdown", &init(true, 1.0));
    if pointer_down && dispatch(el, me, "mousedown", &init(true, 1.0)) {
        focus(el);
    }
    dispatch(el, pe, "pointerup", &init(true, 0.0));
    if pointer_down {
        dispatch(el, me, "mouseup", &init(true, 0.0));
    }
    // A dispatched click runs the element's activation behaviour (follow a link, toggle a
    // checkbox, submit a form).
    dispatch(el, me, "click", &init(true, 0.0));
    Ok(Obj::new().s("clicked", &dom::describe(el)).js())
}
