//! The model status line: not loaded, downloading (bytes, percent, ETA), initializing, ready.

use yew::prelude::*;

use crate::format;
use crate::types::ModelStatus;

/// Properties of [`ModelStatusView`].
#[derive(Clone, Properties, PartialEq)]
pub struct ModelStatusViewProps {
    /// Where the model stands.
    pub status: ModelStatus,
}

/// Shows where the model stands. The phase is a polite live region; the changing numbers are not
/// (they would be read out on every tick), they are on the progress bar instead.
#[function_component(ModelStatusView)]
pub fn model_status_view(props: &ModelStatusViewProps) -> Html {
    let status = &props.status;
    // The bar's width is set through the CSSOM, not a `style` attribute: a page whose CSP has no
    // `style-src 'unsafe-inline'` (the embeddable widget on a strict site) drops style attributes.
    let bar = use_node_ref();
    {
        let bar = bar.clone();
        let width = format!("{:.1}%", status.progress().unwrap_or(0.0) * 100.0);
        use_effect_with(width, move |width| {
            if let Some(el) = bar.cast::<web_sys::HtmlElement>() {
                let _ = el.style().set_property("width", width);
            }
        });
    }
    let body = match *status {
        ModelStatus::NotLoaded => html! {
            <div class="gg-model-line">
                <span role="status">{ "The model loads when you send your first message." }</span>
            </div>
        },
        ModelStatus::Downloading {
            model,
            loaded_bytes,
            total_bytes,
            ..
        } => {
            let fraction = status.progress().unwrap_or(0.0);
            let pct = format::percent(fraction);
            let eta = status.eta_seconds().map(format::eta);
            let numbers = match &eta {
                Some(eta) => format!(
                    "{} of {} · {pct}% · {eta}",
                    format::bytes(loaded_bytes),
                    format::bytes(total_bytes)
                ),
                None => format!(
                    "{} of {} · {pct}%",
                    format::bytes(loaded_bytes),
                    format::bytes(total_bytes)
                ),
            };
            let value_text = match &eta {
                Some(eta) => format!("{pct}%, {eta}"),
                None => format!("{pct}%"),
            };
            html! {
                <>
                    <div class="gg-model-line">
                        <span role="status">{ format!("Downloading {}", model.label()) }</span>
                        <span class="gg-model-numbers">{ numbers }</span>
                    </div>
                    <div class="gg-progress" role="progressbar" aria-label="Model download"
                        aria-valuemin="0" aria-valuemax="100" aria-valuenow={pct.to_string()} aria-valuetext={value_text}>
                        <div class="gg-progress-value" ref={bar.clone()}></div>
                    </div>
                </>
            }
        }
        ModelStatus::Initializing { model } => html! {
            <>
                <div class="gg-model-line">
                    <span role="status">{ format!("Preparing {} on your GPU…", model.label()) }</span>
                </div>
                <div class="gg-progress gg-progress-indeterminate" role="progressbar" aria-label="Preparing the model">
                    <div class="gg-progress-value"></div>
                </div>
            </>
        },
        ModelStatus::Ready {
            model,
            ref unverified,
        } => html! {
            <>
                <div class="gg-model-line">
                    <span role="status">{ format!("{} · runs on this device", model.label()) }</span>
                </div>
                if !unverified.is_empty() {
                    <div class="gg-model-line gg-muted" data-testid="gg-model-unverified" title={unverified.join("\n")}>
                        { if unverified.len() == 1 {
                            format!("{} has no published hash: checked by size only", unverified[0])
                        } else {
                            format!("{} files have no published hash: checked by size only", unverified.len())
                        } }
                    </div>
                }
            </>
        },
    };
    html! {
        <div class="gg-model-status" data-testid="gg-model-status" data-status={status.as_str()}>
            { body }
        </div>
    }
}
