//! Error banners: what went wrong, what to do, and buttons that do it.

use yew::prelude::*;

use crate::types::{ErrorAction, ErrorKind, UiError};

/// Properties of [`ErrorBanner`].
#[derive(Clone, Properties, PartialEq)]
pub struct ErrorBannerProps {
    /// The error shown: its message and actions.
    pub error: UiError,
    /// `(kind, action)` for every button, Dismiss included.
    #[prop_or_default]
    pub on_action: Callback<(ErrorKind, ErrorAction)>,
}

/// One error, announced as an alert.
#[function_component(ErrorBanner)]
pub fn error_banner(props: &ErrorBannerProps) -> Html {
    let kind = props.error.kind;
    let button = |action: ErrorAction, primary: bool| {
        let on_action = props.on_action.clone();
        let onclick = Callback::from(move |_: MouseEvent| on_action.emit((kind, action)));
        let class = if primary {
            "gg-btn gg-btn-primary gg-btn-small"
        } else {
            "gg-btn gg-btn-small"
        };
        html! {
            <button type="button" {class} data-testid="gg-error-action" data-action={action.as_str()} {onclick}>
                { action.label() }
            </button>
        }
    };
    html! {
        <div class="gg-error" data-testid="gg-error" data-kind={kind.as_str()} role="alert">
            <strong class="gg-error-title">{ kind.title() }</strong>
            <p>{ kind.advice() }</p>
            if !props.error.detail.is_empty() {
                <p class="gg-error-detail">{ props.error.detail.clone() }</p>
            }
            <div class="gg-error-actions">
                { for kind.actions().iter().enumerate().map(|(i, a)| button(*a, i == 0)) }
                { button(ErrorAction::Dismiss, false) }
            </div>
        </div>
    }
}
