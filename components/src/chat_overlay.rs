//! The chat panel: header, model status, error banners, the conversation log and the input.

use std::cell::RefCell;
use std::rc::Rc;

use yew::prelude::*;

use crate::composer::{Composer, Outgoing};
use crate::error_banner::ErrorBanner;
use crate::markdown::MarkdownParser;
use crate::message::MessageView;
use crate::model_status::ModelStatusView;
use crate::types::{
    ApprovalDecision, ChatMessage, ErrorAction, ErrorKind, MessageId, ModelStatus, UiError,
};

/// Distance from the bottom (px) within which the log keeps following new text.
const STICK_TO_BOTTOM_PX: i32 = 48;

/// Properties of [`ChatOverlay`].
#[derive(Clone, Properties, PartialEq)]
pub struct ChatOverlayProps {
    /// The conversation, oldest first.
    pub messages: Vec<Rc<ChatMessage>>,
    /// How answers' Markdown is parsed ([`MarkdownParser::here`], or elsewhere).
    pub markdown: MarkdownParser,
    /// An answer is being generated (Stop is shown).
    #[prop_or_default]
    pub generating: bool,
    /// Where the model stands (download, loading, ready, failed), shown above the log.
    #[prop_or_default]
    pub model: ModelStatus,
    /// Errors to show as banners, each with its actions.
    #[prop_or_default]
    pub errors: Vec<UiError>,
    /// The site the chat runs on, shown on "always allow" buttons.
    #[prop_or_default]
    pub site: Option<AttrValue>,
    /// Fill the parent (the extension's overlay iframe) instead of floating as a card.
    #[prop_or_default]
    pub fill: bool,
    /// Focus the input when the panel mounts (it was just opened).
    #[prop_or_default]
    pub autofocus: bool,
    /// The user can attach images (paste, drop, attach button).
    #[prop_or(true)]
    pub images: bool,
    /// The user sent a message: its text (trimmed) and attached images, never both empty.
    pub on_send: Callback<Outgoing>,
    /// The user stopped the answer being generated.
    #[prop_or_default]
    pub on_stop: Callback<()>,
    /// The user asked for a new conversation.
    #[prop_or_default]
    pub on_new_chat: Callback<()>,
    /// `(call id, decision)` when the user answers an approval request.
    #[prop_or_default]
    pub on_approve: Callback<(String, ApprovalDecision)>,
    /// `(kind, action)` when the user presses an error banner's button.
    #[prop_or_default]
    pub on_error_action: Callback<(ErrorKind, ErrorAction)>,
    /// The user opened the settings.
    #[prop_or_default]
    pub on_open_settings: Callback<()>,
    /// Shows a close button when set.
    #[prop_or_default]
    pub on_close: Option<Callback<()>>,
    /// Diagnostics: called each time a message renders (see [`crate::MessageView`]).
    #[prop_or_default]
    pub on_message_render: Option<Callback<MessageId>>,
}

// `scrollTop` is `i32` in stable web-sys and `f64` with `web_sys_unstable_apis` (which the workspace
// sets for wasm32); the `.into()` conversions compile with both.
#[allow(clippy::useless_conversion)] // a no-op in one of the two configurations
fn scroll_to_bottom(el: &web_sys::Element) {
    el.set_scroll_top(el.scroll_height().into());
}

#[allow(clippy::useless_conversion)] // a no-op in one of the two configurations
fn distance_from_bottom(el: &web_sys::Element) -> f64 {
    let top: f64 = el.scroll_top().into();
    f64::from(el.scroll_height()) - top - f64::from(el.client_height())
}

/// A callback with a stable identity that always calls the latest `callback`. Passing it down
/// keeps memoized children (the messages) from re-rendering just because the host built a new
/// closure, without them holding on to a stale one.
#[hook]
fn use_latest_callback<T: 'static>(callback: &Callback<T>) -> Callback<T> {
    let latest = use_mut_ref(|| callback.clone());
    *latest.borrow_mut() = callback.clone();
    let stable = use_memo((), move |_| {
        Callback::from(move |value: T| {
            let current = latest.borrow().clone();
            current.emit(value);
        })
    });
    (*stable).clone()
}

/// The chat panel.
#[function_component(ChatOverlay)]
pub fn chat_overlay(props: &ChatOverlayProps) -> Html {
    let on_approve = use_latest_callback(&props.on_approve);
    let on_render = use_latest_callback(&props.on_message_render.clone().unwrap_or_default());
    let on_render = props.on_message_render.as_ref().map(|_| on_render);
    let log_ref = use_node_ref();
    let stick = use_mut_ref(|| true);

    // Follow new text while the user is at the bottom; leave them alone when they scrolled up.
    {
        let log_ref = log_ref.clone();
        let stick: Rc<RefCell<bool>> = stick.clone();
        use_effect(move || {
            if *stick.borrow()
                && let Some(log) = log_ref.cast::<web_sys::Element>()
            {
                scroll_to_bottom(&log);
            }
        });
    }
    let onscroll = {
        let log_ref = log_ref.clone();
        Callback::from(move |_: Event| {
            if let Some(log) = log_ref.cast::<web_sys::Element>() {
                *stick.borrow_mut() = distance_from_bottom(&log) <= f64::from(STICK_TO_BOTTOM_PX);
            }
        })
    };

    let on_new_chat = props.on_new_chat.reform(|_: MouseEvent| ());
    let on_open_settings = props.on_open_settings.reform(|_: MouseEvent| ());
    let close = props.on_close.as_ref().map(|cb| {
        let onclick = cb.reform(|_: MouseEvent| ());
        html! {
            <button type="button" class="gg-btn gg-btn-ghost gg-icon-btn" data-testid="gg-close" aria-label="Close Gemma Gem" {onclick}>
                { "×" }
            </button>
        }
    });

    let empty = props.messages.is_empty();
    html! {
        <section class="gg-panel" data-testid="gg-panel" data-fill={props.fill.to_string()} aria-label="Gemma Gem chat">
            <header class="gg-header">
                <h2 class="gg-title"><span class="gg-title-gem" aria-hidden="true">{ "◆" }</span>{ "Gemma Gem" }</h2>
                <button type="button" class="gg-btn gg-btn-ghost gg-btn-small" data-testid="gg-new-chat"
                    disabled={empty} onclick={on_new_chat}>{ "New chat" }</button>
                <button type="button" class="gg-btn gg-btn-ghost gg-icon-btn" data-testid="gg-settings-open"
                    aria-label="Settings" onclick={on_open_settings}>{ "⚙" }</button>
                { for close }
            </header>
            <ModelStatusView status={props.model.clone()} />
            if !props.errors.is_empty() {
                <div class="gg-errors">
                    { for props.errors.iter().map(|error| html! {
                        <ErrorBanner key={error.kind.as_str()} error={error.clone()} on_action={props.on_error_action.clone()} />
                    }) }
                </div>
            }
            <div class="gg-log" role="log" aria-live="polite" aria-label="Conversation"
                aria-busy={props.generating.to_string()} tabindex="0" ref={log_ref} {onscroll}>
                if empty {
                    <div class="gg-empty">
                        <span class="gg-empty-gem" aria-hidden="true">{ "◆" }</span>
                        <p>{ "Ask about this page, or ask Gemma Gem to do something on it. Everything runs on your device." }</p>
                    </div>
                }
                <ContextProvider<MarkdownParser> context={props.markdown.clone()}>
                    { for props.messages.iter().map(|message| html! {
                        <MessageView key={message.id} message={Rc::clone(message)} on_approve={on_approve.clone()}
                            site={props.site.clone()} on_render={on_render.clone()} />
                    }) }
                </ContextProvider<MarkdownParser>>
            </div>
            <Composer autofocus={props.autofocus} disabled={props.model.is_loading()} generating={props.generating}
                images={props.images} on_send={props.on_send.clone()} on_stop={props.on_stop.clone()} />
        </section>
    }
}
