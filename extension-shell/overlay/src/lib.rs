//! The overlay page: the chat UI of one tab, shown in an iframe inside the page's closed shadow
//! root. It talks to the service worker only; the agent's events arrive as broadcasts from the
//! offscreen document, of which it shows those of its own tab (the tab Chrome says it is in,
//! learned from the service worker's answer to `GetConversation`).

mod convert;

use gg_agent::ApprovalDecision as AgentDecision;
use gg_chrome::log;
use gg_components::{Action, ApprovalDecision, ChatDispatcher, GemApp, UiIntent};
use gg_messages::{Body, Context, Envelope, RequestId};
use std::cell::{Cell, RefCell};
use wasm_bindgen::prelude::*;
use yew::prelude::*;

thread_local! {
    static DISPATCHER: RefCell<Option<ChatDispatcher>> = const { RefCell::new(None) };
    static TAB: Cell<Option<i64>> = const { Cell::new(None) };
    static LAST_SEQ: Cell<u64> = const { Cell::new(0) };
    /// `(epoch, seq)` of the last model report shown.
    static LAST_MODEL: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    static NEXT_ID: Cell<u64> = const { Cell::new(1) };
}

fn next_id() -> RequestId {
    RequestId(NEXT_ID.with(|n| {
        let id = n.get();
        n.set(id + 1);
        id
    }))
}

fn dispatch(action: Action) {
    DISPATCHER.with(|d| {
        if let Some(d) = d.borrow().as_ref() {
            d.dispatch(action);
        }
    });
}

fn show_error(detail: String) {
    log::error(&detail);
    dispatch(Action::ShowError {
        error: gg_components::UiError::new(gg_components::ErrorKind::GenerationFailed, detail),
    });
}

/// Sends a request to the service worker; an error answer is shown in the UI.
async fn request(body: Body) -> Option<Body> {
    match gg_chrome::send(Context::Overlay, next_id(), body).await {
        Ok(Some(Envelope {
            body: Body::Error { message },
            ..
        })) => {
            show_error(message);
            None
        }
        Ok(Some(env)) => Some(env.body),
        Ok(None) => {
            show_error("the extension did not answer; reload the page".into());
            None
        }
        Err(e) => {
            show_error(e.to_string());
            None
        }
    }
}

async fn load_conversation() {
    if let Some(Body::Conversation {
        tab_id,
        messages,
        running,
    }) = request(Body::GetConversation).await
    {
        TAB.with(|t| t.set(Some(tab_id)));
        dispatch(Action::LoadConversation {
            messages: convert::conversation(&messages),
        });
        if running {
            log::debug("a turn is running in this tab; its next events will stream in");
        }
    }
    // Where the model stands (a download may be running for another tab).
    if let Some(Body::ModelStatus(report)) = request(Body::GetModelStatus).await {
        show_model(report);
    }
}

/// Shows a model report unless a newer one was shown already.
fn show_model(report: gg_messages::ModelReport) {
    let fresh = LAST_MODEL.with(|last| {
        let (epoch, seq) = last.get();
        let fresh = report.epoch != epoch || report.seq > seq;
        if fresh {
            last.set((report.epoch, report.seq));
        }
        fresh
    });
    if !fresh {
        return;
    }
    for action in convert::model_actions(report, TAB.with(Cell::get)) {
        dispatch(action);
    }
}

fn decision(d: ApprovalDecision) -> AgentDecision {
    match d {
        ApprovalDecision::AllowOnce => AgentDecision::AllowOnce,
        ApprovalDecision::AlwaysOnSite => AgentDecision::AlwaysOnSite,
        ApprovalDecision::Deny => AgentDecision::Deny,
    }
}

async fn send_intent(intent: UiIntent) {
    let body = match intent {
        UiIntent::Send { text } => Body::ChatSend { text },
        UiIntent::Stop => Body::ChatStop,
        UiIntent::NewChat => Body::ChatNew,
        UiIntent::Approve {
            call_id,
            decision: d,
        } => match call_id.parse() {
            Ok(call_id) => Body::ChatApproval {
                call_id,
                decision: decision(d),
            },
            Err(_) => return show_error(format!("unknown tool call {call_id}")),
        },
        other => {
            log::debug(&format!("not handled yet: {other:?}"));
            return;
        }
    };
    request(body).await;
}

#[function_component(OverlayApp)]
fn overlay_app() -> Html {
    let on_ready = Callback::from(|d: ChatDispatcher| {
        DISPATCHER.with(|slot| *slot.borrow_mut() = Some(d));
        wasm_bindgen_futures::spawn_local(load_conversation());
    });
    let on_intent =
        Callback::from(|intent: UiIntent| wasm_bindgen_futures::spawn_local(send_intent(intent)));
    html! { <GemApp launcher={false} {on_ready} {on_intent} /> }
}

/// `chrome.runtime.onMessage` broadcasts (never answered here): the agent events of this tab,
/// and the model's status (shown in every tab).
#[wasm_bindgen]
pub fn on_broadcast(message: JsValue) {
    let Ok(json) = gg_chrome::from_js(&message) else {
        return;
    };
    let Ok(env) = Envelope::from_json(json) else {
        return;
    };
    if env.from != Context::Offscreen {
        return;
    }
    let (tab_id, seq, event) = match env.body {
        Body::AgentEvent { tab_id, seq, event } => (tab_id, seq, event),
        Body::ModelStatus(report) => return show_model(report),
        _ => return,
    };
    if TAB.with(Cell::get) != Some(tab_id) {
        return;
    }
    // Sequence numbers: drop anything seen already.
    if LAST_SEQ.with(|s| {
        let stale = seq <= s.get();
        if !stale {
            s.set(seq);
        }
        stale
    }) {
        return;
    }
    for action in convert::event_actions(event) {
        dispatch(action);
    }
}

/// Called by `overlay.js` once the module has loaded.
#[wasm_bindgen]
pub fn start() {
    log::info("overlay started");
    yew::Renderer::<OverlayApp>::new().render();
}
