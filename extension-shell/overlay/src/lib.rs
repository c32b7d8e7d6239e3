//! The overlay page: the chat UI of one tab, shown in an iframe inside the page's closed shadow
//! root. It talks to the service worker only; the agent's events arrive as broadcasts from the
//! offscreen document, of which it shows those of its own tab (the tab Chrome says it is in,
//! learned from the service worker's answer to `GetConversation`).

use gg_ui_bridge as convert;
mod settings;

use gg_chrome::log;
use gg_components::{Action, ChatDispatcher, GemApp, MarkdownParser, ThemeRoot, UiIntent};
use gg_messages::{
    Broadcast, Context, ConversationView, Envelope, OverlayAnswer, OverlayRequest, RequestId,
    SETTINGS_KEY, Settings,
};
use settings::Stored;
use std::cell::RefCell;
use std::collections::HashMap;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use yew::prelude::*;

/// What this overlay knows of its conversation: the UI's dispatcher, its tab, the broadcasts
/// seen, its token and whether the service worker accepted it, the pending approvals. One value
/// for the page (the overlay is one page per tab); read and changed through [`session`].
struct OverlaySession {
    dispatcher: Option<ChatDispatcher>,
    /// The tab this overlay is in (from the service worker's `Conversation` answer).
    tab: Option<i64>,
    /// Sequence number of the last agent event shown.
    last_seq: u64,
    /// `(epoch, seq)` of the last model report shown.
    last_model: (u64, u64),
    next_id: u64,
    /// The user sent a message from this overlay (a stored conversation that arrives later must
    /// not replace what is on screen).
    sent: bool,
    /// The one-time token of this overlay (its URL's fragment, removed from the URL at start).
    token: String,
    /// The service worker accepted the token: this overlay speaks for its tab.
    active: bool,
    /// The nonce of each pending approval, by call id (an answer carries it).
    nonces: HashMap<String, String>,
}

thread_local! {
    static SESSION: RefCell<OverlaySession> = RefCell::new(OverlaySession {
        dispatcher: None,
        tab: None,
        last_seq: 0,
        last_model: (0, 0),
        next_id: 1,
        sent: false,
        token: String::new(),
        active: false,
        nonces: HashMap::new(),
    });
}

/// Reads or changes the overlay's session. `f` must not call back into the UI (a dispatch can
/// run components that read the session again): take what it needs out first.
fn session<R>(f: impl FnOnce(&mut OverlaySession) -> R) -> R {
    SESSION.with(|s| f(&mut s.borrow_mut()))
}

fn next_id() -> RequestId {
    RequestId(session(|s| {
        let id = s.next_id;
        s.next_id += 1;
        id
    }))
}

fn dispatch(action: Action) {
    // Cloned out of the session: dispatching re-renders components, which may read it.
    if let Some(d) = session(|s| s.dispatcher.clone()) {
        d.dispatch(action);
    }
}

fn show_error(detail: String) {
    log::error(&detail);
    dispatch(Action::ShowError {
        error: gg_components::UiError::new(gg_components::ErrorKind::GenerationFailed, detail),
    });
}

/// Sends a request to the service worker; an error answer is shown in the UI.
async fn request(body: OverlayRequest) -> Option<OverlayAnswer> {
    match gg_chrome::send::<_, OverlayAnswer>(Context::Overlay, next_id(), body).await {
        Ok(Some(Envelope {
            body: OverlayAnswer::Error { message },
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
    if let Some(OverlayAnswer::Conversation(ConversationView {
        tab_id,
        messages,
        running,
        notice,
    })) = request(OverlayRequest::GetConversation).await
    {
        session(|s| s.tab = Some(tab_id));
        if session(|s| s.sent) {
            // The answer was on its way before the user's message: showing it would hide that
            // message (the agent has the whole conversation either way).
            log::debug("a message was sent before the stored conversation arrived; kept on screen");
        } else {
            dispatch(Action::LoadConversation {
                messages: convert::conversation_with_notice(&messages, notice.as_deref()),
            });
        }
        if running {
            log::debug("a turn is running in this tab; its next events will stream in");
        }
    }
    // Where the model stands (a download may be running for another tab).
    if let Some(OverlayAnswer::ModelStatus(report)) = request(OverlayRequest::GetModelStatus).await
    {
        show_model(report);
    }
    // Only then the settings' "Downloaded models": listing the cache must not delay the
    // conversation's arrival.
    refresh_stored_models().await;
}

/// Shows a model report unless a newer one was shown already.
fn show_model(report: gg_messages::ModelReport) {
    let fresh = session(|s| {
        let (epoch, seq) = s.last_model;
        let fresh = report.epoch != epoch || report.seq > seq;
        if fresh {
            s.last_model = (report.epoch, report.seq);
        }
        fresh
    });
    if !fresh {
        return;
    }
    // A download that ended (loaded or failed) changed what is stored.
    if matches!(
        report.state,
        gg_messages::ModelState::Ready { .. } | gg_messages::ModelState::NotLoaded
    ) && report.seq > 0
    {
        wasm_bindgen_futures::spawn_local(refresh_stored_models());
    }
    for action in convert::model_actions(report, session(|s| s.tab)) {
        dispatch(action);
    }
}

/// A change could not be stored: the user is told (the panel shows what is stored, so the
/// change is visibly undone).
fn show_save_error(detail: String) {
    log::error(&detail);
    dispatch(Action::ShowError {
        error: gg_components::UiError::new(gg_components::ErrorKind::SaveFailed, detail),
    });
}

/// Asks the service worker (the only writer of the settings and per-site data) to store a
/// change; a refusal or failure is shown. `true` when stored.
async fn save(body: OverlayRequest) -> bool {
    match gg_chrome::send::<_, OverlayAnswer>(Context::Overlay, next_id(), body).await {
        Ok(Some(Envelope {
            body: OverlayAnswer::Ack,
            ..
        })) => true,
        Ok(Some(Envelope {
            body: OverlayAnswer::Error { message },
            ..
        })) => {
            show_save_error(message);
            false
        }
        Ok(Some(other)) => {
            show_save_error(format!(
                "could not save: unexpected answer {:?}",
                other.body
            ));
            false
        }
        Ok(None) => {
            show_save_error("could not save: the extension did not answer; reload the page".into());
            false
        }
        Err(e) => {
            show_save_error(format!("could not save: {e}"));
            false
        }
    }
}

/// What the settings panel shows: the synced settings and the per-site data.
async fn stored() -> Result<Stored, String> {
    let settings = stored_settings().await?;
    let local = gg_chrome::local_items().await.map_err(|e| e.to_string())?;
    Ok(Stored::new(settings, &local))
}

/// The stored settings (defaults when absent; a damaged value is reported and replaced by the
/// defaults rather than blocking the UI).
async fn stored_settings() -> Result<Settings, String> {
    match gg_chrome::sync_get(SETTINGS_KEY).await {
        Ok(None) => Ok(Settings::default()),
        Ok(Some(json)) => Ok(serde_json::from_value(json).unwrap_or_else(|e| {
            log::warn(&format!(
                "stored settings are invalid ({e}); showing the defaults"
            ));
            Settings::default()
        })),
        Err(e) => Err(e.to_string()),
    }
}

/// The panel's "Downloaded models": what Cache Storage holds of the models' repositories.
async fn refresh_stored_models() {
    let Ok(stored) = stored_settings().await else {
        return;
    };
    let repos = settings::repositories(&stored);
    if repos.is_empty() {
        return dispatch(Action::SetModels { models: Vec::new() });
    }
    let repositories = repos.iter().map(|(_, r)| r.clone()).collect();
    // Background information: a failure is logged, not put in front of the user.
    match gg_chrome::send::<_, OverlayAnswer>(
        Context::Overlay,
        next_id(),
        OverlayRequest::GetStoredModels { repositories },
    )
    .await
    {
        Ok(Some(Envelope {
            body: OverlayAnswer::StoredModels { models },
            ..
        })) => dispatch(Action::SetModels {
            models: settings::model_infos(&repos, &models),
        }),
        Ok(other) => log::warn(&format!("could not list the downloaded models: {other:?}")),
        Err(e) => log::warn(&format!("could not list the downloaded models: {e}")),
    }
}

/// The user asked to delete a model's downloaded files.
async fn clear_model(model: gg_components::ModelChoice) {
    let stored = match stored_settings().await {
        Ok(s) => s,
        Err(e) => return show_error(format!("could not read the settings: {e}")),
    };
    let Some((_, repository)) = settings::repositories(&stored)
        .into_iter()
        .find(|(m, _)| *m == model)
    else {
        return show_error(format!(
            "{} has no downloaded files with the current model source",
            model.label()
        ));
    };
    if request(OverlayRequest::ClearModel { repository })
        .await
        .is_some()
    {
        log::info(&format!(
            "deleted the downloaded files of {}",
            model.label()
        ));
    }
    refresh_stored_models().await;
}

/// Settings and site for the panel, at start.
async fn load_settings_and_site() {
    show_stored_settings().await;
    if let Some(OverlayAnswer::Site { site }) = request(OverlayRequest::GetPageSite).await {
        let host = settings::host_of(&site);
        dispatch(Action::SetSite {
            site: (!host.is_empty()).then_some(host),
        });
    }
}

/// Shows what is stored in the settings panel.
async fn show_stored_settings() {
    match stored().await {
        Ok(stored) => dispatch(Action::SetSettings {
            settings: settings::to_ui(&stored),
        }),
        Err(e) => show_error(format!("could not read the settings: {e}")),
    }
}

/// The user edited the settings in this overlay: the service worker stores the changes; every
/// tab (this one included) shows them through `chrome.storage.onChanged`. When one is refused
/// or fails, the panel goes back to what is stored.
async fn settings_changed(ui: gg_components::Settings) {
    let stored = match stored().await {
        Ok(stored) => stored,
        Err(e) => return show_save_error(format!("could not save the settings: {e}")),
    };
    let changes = settings::from_ui(&ui, &stored);
    let mut all_saved = true;
    if let Some(settings) = changes.settings {
        all_saved &= save(OverlayRequest::SaveSettings { settings }).await;
    }
    for (site, disabled) in changes.disabled {
        all_saved &= save(OverlayRequest::SetSiteDisabled { site, disabled }).await;
    }
    for (site, permission) in changes.revoked {
        all_saved &= save(OverlayRequest::RevokeSitePermission { site, permission }).await;
    }
    if !all_saved {
        show_stored_settings().await;
    }
}

/// The agent recorded an "always on this site" permission: the service worker keeps it for every
/// tab and later turns (a permission that cannot persist was never granted for good).
async fn permission_granted(site: String, permission: gg_agent::Permission) {
    if permission.can_persist() {
        save(OverlayRequest::GrantSitePermission { site, permission }).await;
    }
}

/// `chrome.storage.onChanged` for `sync.settings` or a per-site key of `local` (called by
/// `overlay.js`): what is stored now, shown at once in every tab's panel.
#[wasm_bindgen]
pub fn on_settings_changed() {
    wasm_bindgen_futures::spawn_local(async {
        show_stored_settings().await;
        // The model source or size may have changed.
        refresh_stored_models().await;
    });
}

async fn send_intent(intent: UiIntent) {
    let body = match intent {
        UiIntent::Send { text, images } => {
            session(|s| s.sent = true);
            OverlayRequest::ChatSend { text, images }
        }
        UiIntent::Stop => OverlayRequest::ChatStop,
        UiIntent::NewChat => OverlayRequest::ChatNew,
        UiIntent::Approve { call_id, decision } => {
            match (call_id.parse(), session(|s| s.nonces.remove(&call_id))) {
                (Ok(call_id), Some(nonce)) => OverlayRequest::ChatApproval {
                    call_id,
                    nonce,
                    decision,
                },
                _ => return show_error(format!("no approval is pending for tool call {call_id}")),
            }
        }
        UiIntent::SettingsChanged { settings } => return settings_changed(settings).await,
        // The settings change that goes with it removes the host from the page (content script).
        UiIntent::DisableSite { site } => {
            log::info(&format!("Gemma Gem turned off on {site}"));
            return;
        }
        UiIntent::PanelToggled { open: false } => OverlayRequest::ClosePanel,
        UiIntent::ClearModel { model } => return clear_model(model).await,
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
        session(|s| s.dispatcher = Some(d));
        // First opening: the iframe got the focus before this page had loaded.
        focus_input();
        wasm_bindgen_futures::spawn_local(async {
            // The first message presents the token; nothing else is answered before.
            if activate().await {
                wasm_bindgen_futures::spawn_local(load_conversation());
                wasm_bindgen_futures::spawn_local(load_settings_and_site());
            }
        });
    });
    let on_intent = Callback::from(|intent: UiIntent| {
        if session(|s| s.active) {
            wasm_bindgen_futures::spawn_local(send_intent(intent));
        }
    });
    // The page is not in a shadow root: `ThemeRoot` registers the kit's styles in this document
    // (the colours follow the system's light or dark preference).
    html! {
        <ThemeRoot>
            <GemApp markdown={MarkdownParser::here()} launcher={false} closable={true} {on_ready} {on_intent} />
        </ThemeRoot>
    }
}

/// `chrome.runtime.onMessage` broadcasts (never answered here): the agent events of this tab,
/// and the model's status (shown in every tab).
#[wasm_bindgen]
pub fn on_broadcast(message: JsValue) {
    let Ok(json) = gg_chrome::from_js(&message) else {
        return;
    };
    // Only the offscreen document's broadcasts: every other message (requests of other
    // contexts) does not parse as one and is left alone.
    let Ok(env) = Envelope::<Broadcast>::from_json(json) else {
        return;
    };
    if env.from != Context::Offscreen || !session(|s| s.active) {
        return;
    }
    let (tab_id, seq, event) = match env.body {
        Broadcast::AgentEvent { tab_id, seq, event } => (tab_id, seq, event),
        Broadcast::ModelStatus(report) => return show_model(report),
    };
    if session(|s| s.tab) != Some(tab_id) {
        return;
    }
    // Sequence numbers: drop anything seen already.
    if session(|s| {
        let stale = seq <= s.last_seq;
        if !stale {
            s.last_seq = seq;
        }
        stale
    }) {
        return;
    }
    if let gg_agent::AgentEvent::AwaitingApproval { request } = &event {
        // The answer names this request by its nonce, never by a guessable number.
        session(|s| {
            s.nonces
                .insert(request.call_id.to_string(), request.nonce.clone())
        });
    }
    if let gg_agent::AgentEvent::PermissionGranted { site, permission } = &event {
        wasm_bindgen_futures::spawn_local(permission_granted(site.clone(), permission.clone()));
    }
    for action in convert::event_actions(event) {
        dispatch(action);
    }
}

/// Called by `overlay.js` once the module has loaded.
#[wasm_bindgen]
pub fn start() {
    log::info("overlay started");
    let token = take_token();
    session(|s| s.token = token);
    yew::Renderer::<OverlayApp>::new().render();
    focus_input_when_shown();
}

/// The token in this page's URL fragment, which is then removed from the URL (it is used once;
/// nothing later should find it there).
fn take_token() -> String {
    let get = |target: &JsValue, key: &str| {
        js_sys::Reflect::get(target, &key.into()).unwrap_or(JsValue::UNDEFINED)
    };
    let Some(window) = web_sys::window() else {
        return String::new();
    };
    let location = get(&window, "location");
    let hash = get(&location, "hash").as_string().unwrap_or_default();
    if !hash.is_empty() {
        let bare = format!(
            "{}{}",
            get(&location, "pathname").as_string().unwrap_or_default(),
            get(&location, "search").as_string().unwrap_or_default()
        );
        let history = get(&window, "history");
        if let Ok(replace) = get(&history, "replaceState").dyn_into::<js_sys::Function>() {
            let _ = replace.call3(&history, &JsValue::NULL, &"".into(), &bare.into());
        }
    }
    hash.trim_start_matches('#').to_owned()
}

/// Presents this overlay's token to the service worker; `true` once accepted. A refusal is
/// shown (a panel a page framed itself gets nothing else).
async fn activate() -> bool {
    let token = session(|s| core::mem::take(&mut s.token));
    let accepted = matches!(
        request(OverlayRequest::ActivateOverlay { token }).await,
        Some(OverlayAnswer::Ack)
    );
    session(|s| s.active = accepted);
    accepted
}

/// Puts the focus on the message box, unless the user already is somewhere in the panel or
/// this page does not have the focus (the panel is closed).
fn focus_input() {
    let Some(document) = web_sys::window().and_then(|w| w.document()) else {
        return;
    };
    let in_panel = document
        .active_element()
        .is_some_and(|el| el.tag_name() != "BODY");
    if in_panel || !document.has_focus().unwrap_or(false) {
        return;
    }
    if let Some(input) = document
        .query_selector("[data-testid=gg-input]")
        .ok()
        .flatten()
        .and_then(|el| el.dyn_into::<web_sys::HtmlElement>().ok())
    {
        let _ = input.focus();
    }
}

/// The content script focuses the iframe when it opens the panel: the message box takes it.
fn focus_input_when_shown() {
    let Some(window) = web_sys::window() else {
        return;
    };
    let on_focus = Closure::<dyn FnMut()>::new(focus_input);
    if window
        .add_event_listener_with_callback("focus", on_focus.as_ref().unchecked_ref())
        .is_ok()
    {
        // Lives as long as the page.
        on_focus.forget();
    }
}
