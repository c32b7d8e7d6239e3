//! One message of the conversation.

use std::rc::Rc;

use yew::prelude::*;

use crate::markdown::Markdown;
use crate::tool_timeline::ToolTimeline;
use crate::types::{ApprovalDecision, ChatMessage, MessageId, Role, role_attr};

/// Properties of [`MessageView`].
#[derive(Clone, Properties)]
pub struct MessageViewProps {
    /// The message shown.
    pub message: Rc<ChatMessage>,
    /// `(call id, decision)` when the user answers one of its approval requests.
    #[prop_or_default]
    pub on_approve: Callback<(String, ApprovalDecision)>,
    /// The site the chat runs on, shown on "always allow" buttons.
    #[prop_or_default]
    pub site: Option<AttrValue>,
    /// Diagnostics: called every time this message renders (tests use it to prove that streaming
    /// into the last message does not re-render the others).
    #[prop_or_default]
    pub on_render: Option<Callback<MessageId>>,
}

impl PartialEq for MessageViewProps {
    fn eq(&self, other: &Self) -> bool {
        // Unchanged messages keep their `Rc` (see `ChatState`), so this is usually a pointer check.
        (Rc::ptr_eq(&self.message, &other.message) || self.message == other.message)
            && self.on_approve == other.on_approve
            && self.site == other.site
            && self.on_render == other.on_render
    }
}

/// Media types shown inline (a stored conversation could carry anything).
fn shown_image(mime: &str) -> bool {
    matches!(mime, "image/png" | "image/jpeg" | "image/webp")
}

/// A user bubble, or an assistant answer with its thinking, tool calls and Markdown text.
#[function_component(MessageView)]
pub fn message_view(props: &MessageViewProps) -> Html {
    let message = &props.message;
    if let Some(on_render) = &props.on_render {
        on_render.emit(message.id);
    }
    let role = role_attr(message.role);
    match message.role {
        Role::User => html! {
            <article class="gg-msg" data-testid="gg-message" data-role={role} aria-label="You said">
                if !message.images.is_empty() {
                    <div class="gg-msg-images">
                        // Only the inline image types the composer accepts are shown.
                        { for message.images.iter().enumerate().filter(|(_, image)| shown_image(&image.mime_type)).map(|(i, image)| html! {
                            <img data-testid="gg-message-image" src={image.data_url()} alt={format!("Image {} you sent", i + 1)} />
                        }) }
                    </div>
                }
                { message.text.clone() }
            </article>
        },
        Role::System | Role::Tool => Html::default(),
        Role::Model => {
            let thinking_active =
                message.streaming && message.text.is_empty() && message.tools.is_empty();
            let waiting = message.streaming
                && message.text.is_empty()
                && message.thinking.is_empty()
                && message.tools.is_empty();
            html! {
                <article class="gg-msg" data-testid="gg-message" data-role={role}
                    data-streaming={message.streaming.to_string()} aria-label="Gemma Gem said">
                    if !message.thinking.is_empty() {
                        <details class="gg-thinking" data-testid="gg-thinking" data-active={thinking_active.to_string()}>
                            <summary>{ if thinking_active { "Thinking…" } else { "Thoughts" } }</summary>
                            <div class="gg-thinking-body">{ message.thinking.clone() }</div>
                        </details>
                    }
                    // Child components are always rendered (never inside an `if`), so their root
                    // nodes stay put while the plain elements around them come and go.
                    <ToolTimeline steps={message.tools.clone()} on_approve={props.on_approve.clone()} site={props.site.clone()} />
                    <Markdown source={Rc::<str>::from(message.text.as_str())} />
                    if waiting {
                        <p class="gg-msg-note">{ "Working on it…" }</p>
                    }
                    if message.streaming {
                        <span class="gg-cursor" aria-hidden="true"></span>
                    }
                    if message.stopped {
                        <p class="gg-msg-note">{ "Stopped." }</p>
                    }
                </article>
            }
        }
    }
}
