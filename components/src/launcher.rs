//! The gem launcher button.
use stylist::yew::styled_component;
use yew::prelude::*;

/// What the launcher's status dot shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LauncherStatus {
    #[default]
    Idle,
    Loading,
    Thinking,
    Acting,
    Error,
}

impl LauncherStatus {
    /// Stable name, used as `data-status` and in the accessible label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Loading => "loading",
            Self::Thinking => "thinking",
            Self::Acting => "acting",
            Self::Error => "error",
        }
    }
}

#[derive(Properties, PartialEq)]
pub struct LauncherProps {
    #[prop_or_default]
    pub status: LauncherStatus,
    #[prop_or_default]
    pub on_click: Callback<()>,
}

/// The round gem button that opens the chat panel.
#[styled_component(Launcher)]
pub fn launcher(props: &LauncherProps) -> Html {
    let onclick = props.on_click.reform(|_: MouseEvent| ());
    let status = props.status.as_str();
    html! {
        <button
            class={css!(r#"
                width: 48px; height: 48px; border-radius: 50%; border: none; cursor: pointer;
                background: linear-gradient(135deg, #6d5dfc, #3ab0ff); color: white;
                box-shadow: 0 4px 14px rgba(0,0,0,.25); font: 600 20px/48px system-ui, sans-serif;
            "#)}
            data-testid="gg-launcher"
            data-status={status}
            aria-label={format!("Open Gemma Gem ({status})")}
            {onclick}
        >{"◆"}</button>
    }
}
