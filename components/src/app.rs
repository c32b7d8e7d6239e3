//! [`GemApp`]: the whole UI (launcher + chat + settings) wired to the [`ChatState`] reducer.
//!
//! Hosts plug in with two things: `on_intent` receives what the user asked for ([`UiIntent`], serde
//! data the host forwards to the agent), and `on_ready` hands the host a [`ChatDispatcher`] through
//! which it feeds [`Action`]s (tokens, tool steps, model status, errors) into the UI.

use std::rc::Rc;

use yew::prelude::*;

use crate::chat_overlay::ChatOverlay;
use crate::composer::Outgoing;
use crate::error_banner::ErrorBanner;
use crate::launcher::Launcher;
use crate::markdown::MarkdownParser;
use crate::settings_panel::SettingsPanel;
use crate::state::{Action, ChatState, View};
use crate::types::{ErrorAction, ErrorKind, UiError, UiIntent};

/// Sends [`Action`]s into a running [`GemApp`] from outside its component tree.
pub type ChatDispatcher = UseReducerDispatcher<ChatState>;

/// Properties of [`GemApp`].
#[derive(Clone, Properties, PartialEq)]
pub struct GemAppProps {
    /// How answers' Markdown is parsed: [`MarkdownParser::here`], or elsewhere (the widget's
    /// worker). No default, so that a host that parses elsewhere links no parser.
    pub markdown: MarkdownParser,
    /// The starting state (settings, models, site, restored conversation...).
    #[prop_or_default]
    pub initial: Option<Rc<ChatState>>,
    /// Everything the user asks for.
    #[prop_or_default]
    pub on_intent: Callback<UiIntent>,
    /// Called once after mounting with the dispatcher for host events.
    #[prop_or_default]
    pub on_ready: Callback<ChatDispatcher>,
    /// Show the launcher and float the panel over the page (widget). `false`: no launcher, the panel
    /// always shows and fills its parent (the extension's overlay iframe).
    #[prop_or(true)]
    pub launcher: bool,
    /// Without a launcher: show a close button and close on Escape, reported as
    /// [`UiIntent::PanelToggled`] `{ open: false }` (the host hides the panel and returns focus to
    /// the page). Ignored with a launcher, which always closes its own panel.
    #[prop_or_default]
    pub closable: bool,
    /// The user can attach images to messages (the host sends them to a model that sees them).
    #[prop_or(true)]
    pub images: bool,
}

/// The complete Gemma Gem UI.
#[function_component(GemApp)]
pub fn gem_app(props: &GemAppProps) -> Html {
    let initial = props.initial.clone();
    let state = use_reducer(move || initial.map(Rc::unwrap_or_clone).unwrap_or_default());
    let launcher_ref = use_node_ref();
    {
        let dispatcher = state.dispatcher();
        let on_ready = props.on_ready.clone();
        use_effect_with((), move |_| on_ready.emit(dispatcher));
    }

    let intent = props.on_intent.clone();
    let dispatch = {
        let state = state.clone();
        move |action: Action| state.dispatch(action)
    };

    let on_send = {
        let (dispatch, intent) = (dispatch.clone(), intent.clone());
        Callback::from(move |sent: Outgoing| {
            dispatch(Action::UserSent {
                text: sent.text.clone(),
                images: sent.images.clone(),
            });
            intent.emit(UiIntent::Send {
                text: sent.text,
                images: sent.images,
            });
        })
    };
    let on_stop = {
        let (dispatch, intent) = (dispatch.clone(), intent.clone());
        Callback::from(move |()| {
            dispatch(Action::Stop);
            intent.emit(UiIntent::Stop);
        })
    };
    let on_new_chat = {
        let (dispatch, intent) = (dispatch.clone(), intent.clone());
        Callback::from(move |()| {
            dispatch(Action::NewChat);
            intent.emit(UiIntent::NewChat);
        })
    };
    let on_approve = {
        let (dispatch, intent) = (dispatch.clone(), intent.clone());
        Callback::from(move |(call_id, decision): (String, _)| {
            dispatch(Action::ApprovalAnswered {
                call_id: call_id.clone(),
                decision,
            });
            intent.emit(UiIntent::Approve { call_id, decision });
        })
    };
    let on_error_action = {
        let (dispatch, intent) = (dispatch.clone(), intent.clone());
        Callback::from(move |(kind, action)| {
            match action {
                ErrorAction::Dismiss | ErrorAction::Retry => {
                    dispatch(Action::DismissError { kind })
                }
                ErrorAction::OpenSettings => dispatch(Action::SetView {
                    view: View::Settings,
                }),
                ErrorAction::WebGpuHelp | ErrorAction::ReloadPage => {}
            }
            intent.emit(UiIntent::ErrorAction { kind, action });
        })
    };
    let open_settings = {
        let dispatch = dispatch.clone();
        Callback::from(move |()| {
            dispatch(Action::SetView {
                view: View::Settings,
            })
        })
    };
    let close_settings = {
        let dispatch = dispatch.clone();
        Callback::from(move |()| dispatch(Action::SetView { view: View::Chat }))
    };
    let on_settings = {
        let (dispatch, intent) = (dispatch.clone(), intent.clone());
        let state = state.clone();
        Callback::from(move |settings: crate::types::Settings| {
            // A newly disabled site is also reported on its own, so the host can hide the UI there.
            let added = settings
                .disabled_sites
                .iter()
                .find(|s| !state.settings.disabled_sites.contains(s))
                .cloned();
            dispatch(Action::SetSettings {
                settings: settings.clone(),
            });
            intent.emit(UiIntent::SettingsChanged { settings });
            if let Some(site) = added {
                intent.emit(UiIntent::DisableSite { site });
            }
        })
    };
    let on_clear_model = {
        let intent = intent.clone();
        Callback::from(move |model| intent.emit(UiIntent::ClearModel { model }))
    };
    let set_open = {
        let (dispatch, intent) = (dispatch.clone(), intent.clone());
        move |open: bool| {
            dispatch(Action::SetPanelOpen { open });
            intent.emit(UiIntent::PanelToggled { open });
        }
    };
    let on_launcher_click = {
        let set_open = set_open.clone();
        let open = state.panel_open;
        Callback::from(move |()| set_open(!open))
    };
    let on_corner = {
        let (dispatch, intent) = (dispatch.clone(), intent.clone());
        Callback::from(move |corner| {
            dispatch(Action::MoveLauncher { corner });
            intent.emit(UiIntent::MoveLauncher { corner });
        })
    };
    let on_close = if props.launcher {
        let set_open = set_open.clone();
        let launcher_ref = launcher_ref.clone();
        Some(Callback::from(move |()| {
            set_open(false);
            focus_launcher(&launcher_ref);
        }))
    } else if props.closable {
        let intent = intent.clone();
        Some(Callback::from(move |()| {
            intent.emit(UiIntent::PanelToggled { open: false })
        }))
    } else {
        None
    };
    // In-page (with a launcher) Escape closes on keydown. In an iframe (closable, the
    // extension's overlay) it closes on the keyup of an Escape pressed here: the whole key stays
    // inside the frame, so once the panel has closed and the page has the focus back, no
    // `keyup` of it reaches the page.
    let escape_down = use_mut_ref(|| false);
    let onkeydown = {
        let on_close = on_close.clone();
        let escape_down = escape_down.clone();
        let on_keyup = props.closable && !props.launcher;
        Callback::from(move |e: KeyboardEvent| {
            if e.key() == "Escape"
                && let Some(close) = &on_close
            {
                e.stop_propagation();
                if on_keyup {
                    *escape_down.borrow_mut() = true;
                } else {
                    close.emit(());
                }
            }
        })
    };
    let onkeyup = {
        let on_close = on_close.clone();
        Callback::from(move |e: KeyboardEvent| {
            if e.key() == "Escape"
                && std::mem::take(&mut *escape_down.borrow_mut())
                && let Some(close) = &on_close
            {
                e.stop_propagation();
                close.emit(());
            }
        })
    };

    let fill = !props.launcher;
    let show_panel = fill || state.panel_open;
    let site = state.site.clone().map(AttrValue::from);
    let panel = show_panel.then(|| {
        let body = match state.view {
            View::Chat => html! {
                <ChatOverlay messages={state.messages.clone()} markdown={props.markdown.clone()} generating={state.generating} model={state.model.clone()}
                    errors={state.errors.clone()} site={site.clone()} {fill} autofocus={props.launcher} images={props.images}
                    {on_send} {on_stop} {on_new_chat} {on_approve} on_error_action={on_error_action.clone()}
                    on_open_settings={open_settings} on_close={on_close.clone()} />
            },
            View::Settings => {
                // A change made here that could not be stored is said here, not only in the chat.
                let unsaved: Vec<UiError> = state
                    .errors
                    .iter()
                    .filter(|e| e.kind == ErrorKind::SaveFailed)
                    .cloned()
                    .collect();
                html! {
                    <>
                        if !unsaved.is_empty() {
                            <div class="gg-errors">
                                { for unsaved.into_iter().map(|error| html! {
                                    <ErrorBanner key={error.kind.as_str()} error={error.clone()} on_action={on_error_action.clone()} />
                                }) }
                            </div>
                        }
                        <SettingsPanel settings={state.settings.clone()} models={state.models.clone()} site={site.clone()} {fill}
                            on_change={on_settings} {on_clear_model} on_close={close_settings} />
                    </>
                }
            }
        };
        html! {
            <div class="gg-app-panel" data-corner={state.corner.snake_name()} data-fill={fill.to_string()} role="dialog"
                aria-label="Gemma Gem" {onkeydown} {onkeyup}>
                { body }
            </div>
        }
    });
    let launcher = props.launcher.then(|| {
        html! {
            <div ref={launcher_ref.clone()}>
                <Launcher status={state.launcher_status()} progress={state.model.progress()} open={state.panel_open}
                    corner={state.corner} on_click={on_launcher_click} on_corner_change={on_corner} />
            </div>
        }
    });
    html! {
        <>
            { for panel }
            { for launcher }
        </>
    }
}

fn focus_launcher(wrapper: &NodeRef) {
    if let Some(button) = wrapper
        .cast::<web_sys::Element>()
        .and_then(|w| w.query_selector("[data-testid=gg-launcher]").ok().flatten())
        .and_then(|b| wasm_bindgen::JsCast::dyn_into::<web_sys::HtmlElement>(b).ok())
    {
        let _ = button.focus();
    }
}
