//! `use_drag_corner`: a launcher that can be dragged (pointer) or moved with Alt+arrow keys to any
//! corner of the viewport. The press/drag/drop logic is `gg_vocab::CornerDrag`, which the content
//! script's launcher runs too.

use gg_vocab::{CornerDrag, DragEnd};
use yew::prelude::*;

use crate::types::Corner;

/// The handlers and drag state [`use_drag_corner`] gives a launcher button.
pub struct DragCornerHandlers {
    /// Starts a press (primary button only) and captures the pointer.
    pub onpointerdown: Callback<PointerEvent>,
    /// Follows the pressed pointer.
    pub onpointermove: Callback<PointerEvent>,
    /// Ends the press: a drag drops the launcher on the nearest corner.
    pub onpointerup: Callback<PointerEvent>,
    /// Ends the press without moving.
    pub onpointercancel: Callback<PointerEvent>,
    /// The button's click: the launcher's `on_click`, except for the click that ends a drag.
    pub onclick: Callback<MouseEvent>,
    /// Alt+arrow keys move the launcher to the next corner that way.
    pub onkeydown: Callback<KeyboardEvent>,
    /// How far the launcher is being dragged (`None`: not dragging).
    pub dragging: Option<(f64, f64)>,
}

/// The pointer position. `clientX`/`clientY` are `i32` in stable web-sys and `f64` with
/// `web_sys_unstable_apis` (which the workspace sets for wasm32); `.into()` compiles with both.
#[allow(clippy::useless_conversion)] // a no-op in one of the two configurations
fn client_pos(e: &MouseEvent) -> (f64, f64) {
    (e.client_x().into(), e.client_y().into())
}

/// The viewport's size (zeros when unknown).
fn viewport() -> (f64, f64) {
    web_sys::window()
        .map(|w| {
            let num = |v: Result<wasm_bindgen::JsValue, _>| {
                v.ok().and_then(|v| v.as_f64()).unwrap_or(0.0)
            };
            (num(w.inner_width()), num(w.inner_height()))
        })
        .unwrap_or((0.0, 0.0))
}

/// Drag and keyboard handling for a launcher at `corner`: `on_corner_change` gets the corner it
/// is dropped on or moved to (only when that is another corner), `on_click` a click that is not
/// the end of a drag.
#[hook]
pub fn use_drag_corner(
    corner: Corner,
    on_corner_change: Callback<Corner>,
    on_click: Callback<()>,
) -> DragCornerHandlers {
    let drag = use_state(|| None::<CornerDrag>);
    // A drag ends with a click event; swallow that one.
    let suppress_click = use_mut_ref(|| false);

    let onpointerdown = {
        let drag = drag.clone();
        Callback::from(move |e: PointerEvent| {
            if e.button() != 0 {
                return;
            }
            // The button itself: under Yew's event delegation `current_target` is the app's
            // root, and capturing the pointer there sent the release and the click to the root
            // instead of the button (a real mouse click never opened the panel).
            if let Some(target) = e
                .target()
                .and_then(|t| wasm_bindgen::JsCast::dyn_into::<web_sys::Element>(t).ok())
                .and_then(|el| el.closest("button").ok().flatten())
            {
                // Keep receiving moves when the pointer leaves the button (best effort).
                let _ = target.set_pointer_capture(e.pointer_id());
            }
            let (x, y) = client_pos(&e);
            drag.set(Some(CornerDrag::press(e.pointer_id(), x, y)));
        })
    };
    let onpointermove = {
        let drag = drag.clone();
        Callback::from(move |e: PointerEvent| {
            let Some(mut d) = *drag else { return };
            let (x, y) = client_pos(&e);
            if d.move_to(e.pointer_id(), x, y) {
                drag.set(Some(d));
            }
        })
    };
    let onpointerup = {
        let drag = drag.clone();
        let suppress_click = suppress_click.clone();
        let on_corner_change = on_corner_change.clone();
        Callback::from(move |e: PointerEvent| {
            let Some(d) = *drag else { return };
            drag.set(None);
            let (x, y) = client_pos(&e);
            let (width, height) = viewport();
            if let DragEnd::Dropped(next) = d.release(x, y, width, height, corner) {
                *suppress_click.borrow_mut() = true;
                if next != corner {
                    on_corner_change.emit(next);
                }
            }
        })
    };
    let onpointercancel = {
        let drag = drag.clone();
        Callback::from(move |_: PointerEvent| drag.set(None))
    };
    let onclick = Callback::from(move |_: MouseEvent| {
        if std::mem::take(&mut *suppress_click.borrow_mut()) {
            return;
        }
        on_click.emit(());
    });
    let onkeydown = Callback::from(move |e: KeyboardEvent| {
        if !e.alt_key() {
            return;
        }
        let Some(next) = corner.after_key(&e.key()) else {
            return;
        };
        e.prevent_default();
        if next != corner {
            on_corner_change.emit(next);
        }
    });
    DragCornerHandlers {
        onpointerdown,
        onpointermove,
        onpointerup,
        onpointercancel,
        onclick,
        onkeydown,
        dragging: drag.filter(CornerDrag::dragging).map(|d| d.offset()),
    }
}
