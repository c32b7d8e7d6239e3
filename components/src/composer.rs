//! The message input: Enter sends, Shift+Enter adds a line; Stop while an answer is generating.
//! Images can be attached (pasted, dropped on the input row or picked with the attach button):
//! they show as thumbnails above the input, each with a remove button, and go with the text.

use std::rc::Rc;

use gg_agent::ImagePart;
use wasm_bindgen::JsCast;
use yew::prelude::*;

use crate::attach::{self, ACCEPT, MAX_IMAGES};

/// What the user sends: the text (trimmed) and the images attached to it, in order. At least one
/// of the two is non-empty.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Outgoing {
    /// The message's text, trimmed (may be empty when images are attached).
    pub text: String,
    /// The attached images (at most [`MAX_IMAGES`]).
    pub images: Vec<ImagePart>,
}

impl Outgoing {
    /// A text-only message.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            images: Vec::new(),
        }
    }
}

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
    /// Images can be attached (paste, drop, attach button). Off: pasted and dropped files are
    /// left to the page's defaults and no attach button is shown.
    #[prop_or(true)]
    pub images: bool,
    /// Send: the input's text, trimmed, and the attached images; never both empty.
    pub on_send: Callback<Outgoing>,
    /// Stop the answer being generated.
    #[prop_or_default]
    pub on_stop: Callback<()>,
}

/// The input row at the bottom of the chat.
#[function_component(Composer)]
pub fn composer(props: &ComposerProps) -> Html {
    let draft = use_state(String::new);
    // The source of truth for attachments (reads of several files may overlap); the force
    // update re-renders after each change.
    let images = use_mut_ref(Vec::<Rc<ImagePart>>::new);
    let rerender = use_force_update();
    let attach_error = use_state(|| None::<String>);
    let input_ref = use_node_ref();
    let file_ref = use_node_ref();
    {
        let input_ref = input_ref.clone();
        let autofocus = props.autofocus;
        use_effect_with((), move |_| {
            if autofocus && let Some(input) = input_ref.cast::<web_sys::HtmlElement>() {
                let _ = input.focus();
            }
        });
    }
    let can_send = !props.disabled
        && !props.generating
        && (!draft.trim().is_empty() || !images.borrow().is_empty());

    let send = {
        let (draft, images, attach_error) = (draft.clone(), images.clone(), attach_error.clone());
        let on_send = props.on_send.clone();
        move || {
            let text = draft.trim().to_owned();
            if text.is_empty() && images.borrow().is_empty() {
                return;
            }
            let sent = std::mem::take(&mut *images.borrow_mut())
                .into_iter()
                .map(Rc::unwrap_or_clone)
                .collect();
            draft.set(String::new());
            attach_error.set(None);
            on_send.emit(Outgoing { text, images: sent });
        }
    };
    // Reads files (pasted, dropped or picked) and appends the accepted ones; the first refusal
    // (not an image, too large, too many) is shown under the thumbnails.
    let add_files = {
        let (images, attach_error, rerender) =
            (images.clone(), attach_error.clone(), rerender.clone());
        let enabled = props.images && !props.disabled;
        Rc::new(move |files: Vec<web_sys::File>| {
            if !enabled || files.is_empty() {
                return;
            }
            let (images, attach_error, rerender) =
                (images.clone(), attach_error.clone(), rerender.clone());
            wasm_bindgen_futures::spawn_local(async move {
                let mut error = None;
                for file in files {
                    if images.borrow().len() >= MAX_IMAGES {
                        error = Some(format!(
                            "at most {MAX_IMAGES} images can be sent with one message"
                        ));
                        break;
                    }
                    match attach::read_file(file).await {
                        // Checked again: another read may have finished meanwhile.
                        Ok(part) if images.borrow().len() < MAX_IMAGES => {
                            images.borrow_mut().push(Rc::new(part));
                        }
                        Ok(_) => {
                            error = Some(format!(
                                "at most {MAX_IMAGES} images can be sent with one message"
                            ));
                        }
                        Err(e) => {
                            error.get_or_insert(e);
                        }
                    }
                }
                attach_error.set(error);
                rerender.force_update();
            });
        })
    };
    let onpaste = {
        let add_files = add_files.clone();
        let enabled = props.images;
        Callback::from(move |e: Event| {
            let Some(e) = e.dyn_ref::<web_sys::ClipboardEvent>() else {
                return;
            };
            let files = attach::files_of(e.clipboard_data().and_then(|d| d.files()));
            // Text pastes stay the textarea's; a paste with image files attaches them.
            if enabled && files.iter().any(|f| attach::looks_like_image(&f.type_())) {
                e.prevent_default();
                add_files(files);
            }
        })
    };
    let ondragover = {
        let enabled = props.images && !props.disabled;
        Callback::from(move |e: DragEvent| {
            let has_files = e.data_transfer().is_some_and(|d| {
                d.types()
                    .iter()
                    .any(|t| t.as_string().as_deref() == Some("Files"))
            });
            if enabled && has_files {
                // Allows the drop (and shows the copy cursor).
                e.prevent_default();
                if let Some(d) = e.data_transfer() {
                    d.set_drop_effect("copy");
                }
            }
        })
    };
    let ondrop = {
        let add_files = add_files.clone();
        let enabled = props.images && !props.disabled;
        Callback::from(move |e: DragEvent| {
            if !enabled {
                return;
            }
            let files = attach::files_of(e.data_transfer().and_then(|d| d.files()));
            if !files.is_empty() {
                e.prevent_default();
                add_files(files);
            }
        })
    };
    let onpick = {
        let add_files = add_files.clone();
        Callback::from(move |e: Event| {
            if let Some(input) = e
                .target()
                .and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok())
            {
                add_files(attach::files_of(input.files()));
                // The same file can be picked again after it was removed.
                input.set_value("");
            }
        })
    };
    let onattach = {
        let file_ref = file_ref.clone();
        Callback::from(move |_: MouseEvent| {
            if let Some(input) = file_ref.cast::<web_sys::HtmlInputElement>() {
                input.click();
            }
        })
    };
    let remove = {
        let (images, attach_error, rerender) =
            (images.clone(), attach_error.clone(), rerender.clone());
        move |index: usize| {
            let (images, attach_error, rerender) =
                (images.clone(), attach_error.clone(), rerender.clone());
            Callback::from(move |_: MouseEvent| {
                if index < images.borrow().len() {
                    images.borrow_mut().remove(index);
                }
                attach_error.set(None);
                rerender.force_update();
            })
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
    let shown: Vec<Rc<ImagePart>> = images.borrow().clone();
    let thumbnails = (!shown.is_empty() || attach_error.is_some()).then(|| {
        html! {
            <div class="gg-attachments" data-testid="gg-attachments">
                { for shown.iter().enumerate().map(|(i, image)| html! {
                    <figure class="gg-attachment" data-testid="gg-attachment" key={i}>
                        <img src={image.data_url()} alt={format!("Attached image {}", i + 1)} />
                        <button type="button" class="gg-btn gg-btn-ghost gg-attachment-remove" data-testid="gg-attachment-remove"
                            aria-label={format!("Remove attached image {}", i + 1)} onclick={remove(i)}>{ "×" }</button>
                    </figure>
                }) }
                if let Some(error) = &*attach_error {
                    <p class="gg-attach-error" role="alert" data-testid="gg-attach-error">{ error.clone() }</p>
                }
            </div>
        }
    });
    html! {
        <form class="gg-composer" {onsubmit} {ondragover} {ondrop}>
            { for thumbnails }
            <div class="gg-composer-row">
            if props.images {
                <input type="file" class="gg-visually-hidden" data-testid="gg-attach-input" accept={ACCEPT} multiple=true
                    tabindex="-1" aria-hidden="true" ref={file_ref} onchange={onpick} disabled={props.disabled} />
                <button type="button" class="gg-btn gg-btn-ghost gg-icon-btn" data-testid="gg-attach"
                    aria-label="Attach an image" title="Attach an image (or paste or drop one)"
                    disabled={props.disabled || props.generating} onclick={onattach}>{ "📎" }</button>
            }
            <label class="gg-composer-label">
                <span class="gg-visually-hidden">{ "Message Gemma Gem (Enter sends, Shift+Enter adds a line)" }</span>
                <textarea class="gg-input" data-testid="gg-input" rows="1" ref={input_ref}
                    placeholder={placeholder}
                    disabled={props.disabled}
                    value={(*draft).clone()}
                    {oninput} {onkeydown} {onpaste} />
            </label>
            if props.generating {
                <button type="button" class="gg-btn gg-btn-danger" data-testid="gg-stop" onclick={onstop}
                    aria-label="Stop the answer">{ "Stop" }</button>
            } else {
                <button type="submit" class="gg-btn gg-btn-primary" data-testid="gg-send" disabled={!can_send}
                    aria-label="Send message">{ "Send" }</button>
            }
            </div>
        </form>
    }
}
