//! The gem launcher button: opens the panel, shows a status dot and a download progress ring, and
//! can be dragged (pointer) or moved with Alt+arrow keys to any corner of the viewport.

use serde::{Deserialize, Serialize};
use yew::prelude::*;

use crate::types::Corner;

/// What the launcher's status dot shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LauncherStatus {
    #[default]
    Idle,
    Loading,
    Thinking,
    Acting,
    Error,
}

impl LauncherStatus {
    pub const ALL: [LauncherStatus; 5] = [
        Self::Idle,
        Self::Loading,
        Self::Thinking,
        Self::Acting,
        Self::Error,
    ];

    /// Stable name, used as `data-status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Loading => "loading",
            Self::Thinking => "thinking",
            Self::Acting => "acting",
            Self::Error => "error",
        }
    }

    /// Words for the accessible label.
    pub fn aria_label(self) -> &'static str {
        match self {
            Self::Idle => "ready",
            Self::Loading => "loading the model",
            Self::Thinking => "thinking",
            Self::Acting => "acting on the page",
            Self::Error => "needs attention",
        }
    }
}

#[derive(Clone, Properties, PartialEq)]
pub struct LauncherProps {
    #[prop_or_default]
    pub status: LauncherStatus,
    /// Download progress 0..=1; shows the ring when set.
    #[prop_or_default]
    pub progress: Option<f64>,
    /// Whether the panel it controls is open (`aria-expanded`).
    #[prop_or_default]
    pub open: bool,
    #[prop_or_default]
    pub corner: Corner,
    /// Position itself `fixed` at `corner` (the widget); `false` lays it out inline (playground, or
    /// a host that positions it).
    #[prop_or(true)]
    pub fixed: bool,
    #[prop_or_default]
    pub on_click: Callback<()>,
    /// Dragged (or Alt+arrow moved) to another corner.
    #[prop_or_default]
    pub on_corner_change: Callback<Corner>,
}

const RING_RADIUS: f64 = 25.0;
/// Pointer travel (px) after which a press is a drag rather than a click.
const DRAG_THRESHOLD: f64 = 5.0;

#[derive(Clone, Copy, Default, PartialEq)]
struct Drag {
    pointer_id: i32,
    start_x: f64,
    start_y: f64,
    dx: f64,
    dy: f64,
    moved: bool,
}

/// The pointer position. `clientX`/`clientY` are `i32` in stable web-sys and `f64` with
/// `web_sys_unstable_apis` (which the workspace sets for wasm32); `.into()` compiles with both.
#[allow(clippy::useless_conversion)] // a no-op in one of the two configurations
fn client_pos(e: &MouseEvent) -> (f64, f64) {
    (e.client_x().into(), e.client_y().into())
}

/// The round gem button that opens the chat panel.
#[function_component(Launcher)]
pub fn launcher(props: &LauncherProps) -> Html {
    let drag = use_state(|| None::<Drag>);
    // A drag ends with a click event; swallow that one.
    let suppress_click = use_mut_ref(|| false);

    let onpointerdown = {
        let drag = drag.clone();
        Callback::from(move |e: PointerEvent| {
            if e.button() != 0 {
                return;
            }
            if let Some(target) = e
                .current_target()
                .and_then(|t| wasm_bindgen::JsCast::dyn_into::<web_sys::Element>(t).ok())
            {
                // Keep receiving moves when the pointer leaves the button (best effort).
                let _ = target.set_pointer_capture(e.pointer_id());
            }
            drag.set(Some(Drag {
                pointer_id: e.pointer_id(),
                start_x: client_pos(&e).0,
                start_y: client_pos(&e).1,
                ..Drag::default()
            }));
        })
    };
    let onpointermove = {
        let drag = drag.clone();
        Callback::from(move |e: PointerEvent| {
            let Some(mut d) = *drag else { return };
            if d.pointer_id != e.pointer_id() {
                return;
            }
            let (x, y) = client_pos(&e);
            d.dx = x - d.start_x;
            d.dy = y - d.start_y;
            d.moved |= d.dx.hypot(d.dy) > DRAG_THRESHOLD;
            drag.set(Some(d));
        })
    };
    let onpointerup = {
        let drag = drag.clone();
        let suppress_click = suppress_click.clone();
        let on_corner_change = props.on_corner_change.clone();
        let corner = props.corner;
        Callback::from(move |e: PointerEvent| {
            let Some(d) = *drag else { return };
            drag.set(None);
            if !d.moved {
                return;
            }
            *suppress_click.borrow_mut() = true;
            let (width, height) = web_sys::window()
                .map(|w| {
                    let num = |v: Result<wasm_bindgen::JsValue, _>| {
                        v.ok().and_then(|v| v.as_f64()).unwrap_or(0.0)
                    };
                    (num(w.inner_width()), num(w.inner_height()))
                })
                .unwrap_or((0.0, 0.0));
            if width > 0.0 && height > 0.0 {
                let next = Corner::nearest(client_pos(&e).0, client_pos(&e).1, width, height);
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
    let onclick = {
        let on_click = props.on_click.clone();
        let suppress_click = suppress_click.clone();
        Callback::from(move |_: MouseEvent| {
            if std::mem::take(&mut *suppress_click.borrow_mut()) {
                return;
            }
            on_click.emit(());
        })
    };
    let onkeydown = {
        let on_corner_change = props.on_corner_change.clone();
        let corner = props.corner;
        Callback::from(move |e: KeyboardEvent| {
            if !e.alt_key() {
                return;
            }
            let (dx, dy) = match e.key().as_str() {
                "ArrowLeft" => (-1, 0),
                "ArrowRight" => (1, 0),
                "ArrowUp" => (0, -1),
                "ArrowDown" => (0, 1),
                _ => return,
            };
            e.prevent_default();
            let next = corner.moved(dx, dy);
            if next != corner {
                on_corner_change.emit(next);
            }
        })
    };

    let status = props.status;
    let dragging = drag.is_some_and(|d| d.moved);
    let style = drag
        .filter(|d| d.moved)
        .map(|d| format!("transform: translate({:.0}px, {:.0}px)", d.dx, d.dy));
    let circumference = 2.0 * std::f64::consts::PI * RING_RADIUS;
    let ring = props.progress.map(|p| {
        let p = if p.is_finite() { p.clamp(0.0, 1.0) } else { 0.0 };
        let offset = circumference * (1.0 - p);
        html! {
            <svg class="gg-launcher-ring" viewBox="0 0 56 56" aria-hidden="true" data-progress={format!("{:.0}", p * 100.0)}>
                <circle class="gg-launcher-ring-track" cx="28" cy="28" r={RING_RADIUS.to_string()} />
                <circle class="gg-launcher-ring-value" cx="28" cy="28" r={RING_RADIUS.to_string()}
                    stroke-dasharray={format!("{circumference:.2}")}
                    stroke-dashoffset={format!("{offset:.2}")} />
            </svg>
        }
    });
    let label = match props.progress {
        Some(p) => format!(
            "Gemma Gem, {}, {}% downloaded. Alt+arrow keys move it.",
            status.aria_label(),
            crate::format::percent(p)
        ),
        None => format!(
            "Gemma Gem, {}. Alt+arrow keys move it.",
            status.aria_label()
        ),
    };
    html! {
        <div class="gg-launcher-wrap" data-corner={props.corner.snake_name()} data-fixed={props.fixed.to_string()}>
            { for ring }
            <button
                type="button"
                class="gg-launcher"
                data-testid="gg-launcher"
                data-status={status.as_str()}
                data-dragging={dragging.to_string()}
                aria-label={label}
                aria-expanded={props.open.to_string()}
                aria-haspopup="dialog"
                {style}
                {onclick} {onkeydown} {onpointerdown} {onpointermove} {onpointerup} {onpointercancel}
            >
                <span aria-hidden="true">{ "◆" }</span>
            </button>
            <span class="gg-launcher-dot" data-status={status.as_str()} aria-hidden="true"></span>
        </div>
    }
}
