//! The gem launcher button: opens the panel, shows a status dot and a download progress ring, and
//! can be dragged (pointer) or moved with Alt+arrow keys to any corner of the viewport.

use serde::{Deserialize, Serialize};
use yew::prelude::*;

use crate::drag_corner::{DragCornerHandlers, use_drag_corner};
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

/// Properties of [`Launcher`].
#[derive(Clone, Properties, PartialEq)]
pub struct LauncherProps {
    /// What the status dot shows.
    #[prop_or_default]
    pub status: LauncherStatus,
    /// Download progress 0..=1; shows the ring when set.
    #[prop_or_default]
    pub progress: Option<f64>,
    /// Whether the panel it controls is open (`aria-expanded`).
    #[prop_or_default]
    pub open: bool,
    /// The corner of the viewport it sits in.
    #[prop_or_default]
    pub corner: Corner,
    /// Position itself `fixed` at `corner` (the widget); `false` lays it out inline (playground, or
    /// a host that positions it).
    #[prop_or(true)]
    pub fixed: bool,
    /// Pressed (a click that does not end a drag), or Enter/Space.
    #[prop_or_default]
    pub on_click: Callback<()>,
    /// Dragged (or Alt+arrow moved) to another corner.
    #[prop_or_default]
    pub on_corner_change: Callback<Corner>,
}

const RING_RADIUS: f64 = 25.0;

/// The round gem button that opens the chat panel.
#[function_component(Launcher)]
pub fn launcher(props: &LauncherProps) -> Html {
    let DragCornerHandlers {
        onpointerdown,
        onpointermove,
        onpointerup,
        onpointercancel,
        onclick,
        onkeydown,
        dragging: drag,
    } = use_drag_corner(
        props.corner,
        props.on_corner_change.clone(),
        props.on_click.clone(),
    );

    let status = props.status;
    let dragging = drag.is_some();
    // The drag offset goes through the CSSOM, not a `style` attribute, which a page whose CSP has
    // no `style-src 'unsafe-inline'` (the embeddable widget on a strict site) would drop.
    let button = use_node_ref();
    {
        let button = button.clone();
        let transform = drag
            .map(|(dx, dy)| format!("translate({dx:.0}px, {dy:.0}px)"))
            .unwrap_or_default();
        use_effect_with(transform, move |transform| {
            if let Some(el) = button.cast::<web_sys::HtmlElement>() {
                let style = el.style();
                let _ = if transform.is_empty() {
                    style.remove_property("transform").map(drop)
                } else {
                    style.set_property("transform", transform)
                };
            }
        });
    }
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
                ref={button}
                {onclick} {onkeydown} {onpointerdown} {onpointermove} {onpointerup} {onpointercancel}
            >
                <span aria-hidden="true">{ "◆" }</span>
            </button>
            <span class="gg-launcher-dot" data-status={status.as_str()} aria-hidden="true"></span>
        </div>
    }
}
