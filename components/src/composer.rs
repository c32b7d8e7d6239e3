//! The message input: Enter sends, Shift+Enter adds a line; Stop while an answer is generating.

use wasm_bindgen::JsCast;
use yew::prelude::*;

/// Properties of [`Composer`].
#[derive(Clone, Properties, PartialEq)]
pub struct ComposerProps {
    /// The model is loading (or the UI cannot send): the input is disabled.
    #[prop_or_default]
    pub disabled: bool,
    /// An answer is being generated: Stop replaces Send.
    #[prop_or_default]
    pub generating: bool,
    /// The input's placeholder (a default is shown when unset).
    #[prop_or_default]
    pub placeholder: Option<AttrValue>,
    /// Focus the input when it mounts (the panel was just opened by the user).
    #[prop_or_default]
    pub autofocus: bool,
    /// Send: the input's text, trimmed and non-empty.
    pub on_send: Callback<String>,
    /// Stop the answer being generated.
    #[prop_or_default]
    pub on_stop: Callback<()>,
}

/// The input row at the bottom of the chat.
#[function_component(Composer)]
pub fn composer(props: &ComposerProps) -> Html {
    let draft = use_state(String::new);
    let input_ref = use_node_ref();
    {
        let input_ref = input_ref.clone();
        let autofocus = props.autofocus;
        use_effect_with((), move |_| {
            if autofocus && let Some(input) = input_ref.cast::<web_sys::HtmlElement>() {
                let _ = input.focus();
            }
        });
    }
    let can_send = !props.disabled && !props.generating && !draft.trim().is_empty();

    let send = {
        let draft = draft.clone();
        let on_send = props.on_send.clone();
        move || {
            let text = draft.trim().to_owned();
            if text.is_empty() {
                return;
            }
            draft.set(String::new());
            on_send.emit(text);
        }
    };
    let onsubmit = {
        let send = send.clone();
        Callback::from(move |e: SubmitEvent| {
            e.prevent_default();
            if can_send {
                send();
            }
        })
    };
    let onkeydown = Callback::from(move |e: KeyboardEvent| {
        if e.key() == "Enter" && !e.shift_key() && !e.is_composing() {
            e.prevent_default();
            if can_send {
                send();
            }
        }
    });
    let oninput = {
        let draft = draft.clone();
        Callback::from(move |e: InputEvent| {
            if let Some(area) = e
                .target()
                .and_then(|t| t.dyn_into::<web_sys::HtmlTextAreaElement>().ok())
            {
                draft.set(area.value());
            }
        })
    };
    let onstop = {
        let on_stop = props.on_stop.clone();
        Callback::from(move |_: MouseEvent| on_stop.emit(()))
    };
    let placeholder = props.placeholder.clone().unwrap_or_else(|| {
        AttrValue::from(if props.disabled {
            "Loading the model…"
        } else {
            "Ask about this page…"
        })
    });
    html! {
        <form class="gg-composer" {onsubmit}>
            <label class="gg-composer-label">
                <span class="gg-visually-hidden">{ "Message Gemma Gem (Enter sends, Shift+Enter adds a line)" }</span>
                <textarea class="gg-input" data-testid="gg-input" rows="1" ref={input_ref}
                    placeholder={placeholder}
                    disabled={props.disabled}
                    value={(*draft).clone()}
                    {oninput} {onkeydown} />
            </label>
            if props.generating {
                <button type="button" class="gg-btn gg-btn-danger" data-testid="gg-stop" onclick={onstop}
                    aria-label="Stop the answer">{ "Stop" }</button>
            } else {
                <button type="submit" class="gg-btn gg-btn-primary" data-testid="gg-send" disabled={!can_send}
                    aria-label="Send message">{ "Send" }</button>
            }
        </form>
    }
}
