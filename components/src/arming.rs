//! Approval buttons that a page cannot trick the user into pressing (clickjacking).
//!
//! A hostile page can cover the overlay with its own content (a decoy that says "Close" where
//! the overlay says "Allow"), or show the overlay only for the instant of a click it expects. So
//! the buttons of an approval request are enabled only
//! - after [`ARM_DELAY_MS`] of being fully visible, and
//! - while they are visible and unobscured: an `IntersectionObserver` with `trackVisibility`
//!   (Intersection Observer v2) reports `isVisible` only when nothing else is painted over the
//!   target and no opacity, filter or transform effect applies to it or to the frames above it,
//!   whichever document (our iframe's or the embedding page's) that content belongs to.
//!
//! Any obscuring disables the buttons at once and starts the delay again when it ends. Where the
//! browser has no Intersection Observer v2 (`isVisible` absent), the buttons must be fully inside
//! the viewport for the delay; occlusion is then not detected (the extension runs in Chromium,
//! which has it; see `docs/SECURITY.md`).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use gloo_timers::callback::Timeout;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use yew::prelude::*;

/// How long the buttons must have been visible before they are enabled. Long enough that a
/// click aimed at something the page showed there a moment ago does not land on them.
pub const ARM_DELAY_MS: u32 = 700;
/// Intersection Observer v2 computes visibility at most this often (its minimum is 100 ms).
const OBSERVER_DELAY_MS: u32 = 100;

/// Whether the buttons of an approval request may be pressed yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arming {
    /// Visible, waiting for [`ARM_DELAY_MS`] (also the state before the first observation).
    Waiting,
    /// Covered, transparent, transformed or off screen: disabled until it is visible again.
    Obscured,
    /// Visible for long enough: the buttons work.
    Armed,
}

impl Arming {
    pub fn armed(self) -> bool {
        self == Arming::Armed
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Arming::Waiting => "waiting",
            Arming::Obscured => "obscured",
            Arming::Armed => "armed",
        }
    }
}

/// Fully shown and, where the browser can tell, unobscured. Reads `isVisible` by name: it is
/// the v2 field, which `web-sys` does not bind.
fn entry_visible(entry: &JsValue) -> bool {
    let get = |name: &str| js_sys::Reflect::get(entry, &JsValue::from_str(name)).ok();
    let intersecting = get("isIntersecting").and_then(|v| v.as_bool()) == Some(true);
    let ratio = get("intersectionRatio")
        .and_then(|v| v.as_f64())
        .unwrap_or(0.0);
    let inside = intersecting && ratio >= 0.99;
    match get("isVisible").and_then(|v| v.as_bool()) {
        Some(visible) => inside && visible,
        None => inside,
    }
}

/// Watches `target` (the row of buttons) and says whether its buttons may be pressed. Starts
/// [`Arming::Waiting`]; stays there in server-side rendering, where no effect runs.
/// The observer and its callback, kept alive until the effect's cleanup.
type Watching = (
    web_sys::IntersectionObserver,
    Closure<dyn FnMut(js_sys::Array)>,
);

#[hook]
pub fn use_arming(target: NodeRef) -> Arming {
    let state = use_state_eq(|| Arming::Waiting);
    {
        let state = state.clone();
        use_effect_with(target, move |target| {
            let timer: Rc<RefCell<Option<Timeout>>> = Rc::default();
            // Whether the last timer fired: the handle's value is the one of this render.
            let armed: Rc<Cell<bool>> = Rc::default();
            let observe = || -> Option<Watching> {
                let element = target.cast::<web_sys::Element>()?;
                let timer = timer.clone();
                let state = state.clone();
                let armed = armed.clone();
                let on_change =
                    Closure::<dyn FnMut(js_sys::Array)>::new(move |entries: js_sys::Array| {
                        // The newest observation is the last one.
                        let visible = entries.iter().last().is_some_and(|e| entry_visible(&e));
                        if !visible {
                            timer.borrow_mut().take();
                            armed.set(false);
                            state.set(Arming::Obscured);
                        } else if !armed.get() && timer.borrow().is_none() {
                            state.set(Arming::Waiting);
                            let arm = state.clone();
                            let slot = timer.clone();
                            let fired = armed.clone();
                            *timer.borrow_mut() = Some(Timeout::new(ARM_DELAY_MS, move || {
                                slot.borrow_mut().take();
                                fired.set(true);
                                arm.set(Arming::Armed);
                            }));
                        }
                    });
                let init = web_sys::IntersectionObserverInit::new();
                let thresholds = js_sys::Array::of3(&0.0.into(), &0.99.into(), &1.0.into());
                init.set_threshold(&thresholds);
                // The v2 options by name (not bound by web-sys); ignored where unsupported.
                let _ = js_sys::Reflect::set(&init, &"trackVisibility".into(), &JsValue::TRUE);
                let _ = js_sys::Reflect::set(&init, &"delay".into(), &OBSERVER_DELAY_MS.into());
                let observer = web_sys::IntersectionObserver::new_with_options(
                    on_change.as_ref().unchecked_ref(),
                    &init,
                )
                .ok()?;
                observer.observe(&element);
                Some((observer, on_change))
            };
            let watching = observe();
            if watching.is_none() {
                // No observer (a very old browser): the delay alone.
                let arm = state.clone();
                *timer.borrow_mut() =
                    Some(Timeout::new(ARM_DELAY_MS, move || arm.set(Arming::Armed)));
            }
            move || {
                if let Some((observer, _closure)) = watching {
                    observer.disconnect();
                }
                // Dropping the timeout cancels it.
                timer.borrow_mut().take();
            }
        });
    }
    *state
}
