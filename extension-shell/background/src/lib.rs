//! The extension's service worker (module worker). `background.js` registers the Chrome event
//! listeners synchronously (as MV3 requires) and forwards each event to the exports below once the
//! wasm module has loaded.
//!
//! Routing (see `docs/ARCHITECTURE.md`): overlays talk to the service worker; the service worker
//! talks to the offscreen document (which runs the agent) and to the content scripts (which run
//! the page tools). The service worker keeps each tab's conversation in `chrome.storage.session`
//! so that nothing is lost when Chrome stops it.

mod overlay_gate;
mod storage;
mod tools;

use gg_chrome::{ChromeError, log};
use gg_messages::{
    AdapterReport, Broadcast, ContentAnswer, ContentCommand, ContentReply, ContentRequest, Context,
    Envelope, OFFSCREEN_STATUS_KEY, OffscreenAnswer, OffscreenCommand, OffscreenReply,
    OffscreenRequest, OverlayAnswer, OverlayRequest, PageBinding, PanelAction, RequestId,
    SenderInfo, StatusReport, TOGGLE_COMMAND, conversation_key,
};
use serde_json::Value;
use std::cell::Cell;
use wasm_bindgen::prelude::*;

use gg_messages::OFFSCREEN_PATH;

thread_local! {
    static NEXT_ID: Cell<u64> = const { Cell::new(1) };
}

fn next_id() -> RequestId {
    RequestId(NEXT_ID.with(|n| {
        let id = n.get();
        n.set(id + 1);
        id
    }))
}

/// A message that must come from a tab came from none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this message must come from a tab")]
pub(crate) struct NoTab;

/// Why the service worker could not do what another context asked (the text is what that
/// context is told, and what its overlay shows).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("{0}")]
    NoTab(#[from] NoTab),
    #[error("cannot tell which page this tab shows: {0}")]
    NoTopFrame(ChromeError),
    #[error("the message was not sent: {0}")]
    Images(String),
    #[error("{0}")]
    Chrome(#[from] ChromeError),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("stored conversation unreadable: {0}")]
    StoredConversation(serde_json::Error),
    /// The overlay gate refused the message.
    #[error("{0}")]
    Gate(#[from] overlay_gate::GateError),
    #[error("{0}")]
    Check(#[from] gg_messages::storage::CheckError),
    #[error("{0}")]
    Storage(#[from] storage::StorageError),
    /// The offscreen document answered with an error.
    #[error("{0}")]
    Offscreen(String),
    #[error("unexpected answer from {0:?}")]
    AnswerFrom(Context),
    #[error("the offscreen document did not answer")]
    OffscreenSilent,
    #[error("the offscreen document did not start within 10 s")]
    OffscreenNotStarted,
    /// An answer of the right channel, but not the one the request asks for (its `Debug` form).
    #[error("unexpected answer {0}")]
    UnexpectedAnswer(String),
    #[error("{}", PAGE_CHANGED)]
    PageChanged,
}

/// Called once when the module has loaded.
#[wasm_bindgen]
pub fn start() {
    log::info("service worker started");
}

/// `chrome.runtime.onInstalled` / `onStartup`: bring the offscreen document up early so the first
/// message does not wait for it.
#[wasm_bindgen]
pub async fn on_startup() -> Result<(), JsValue> {
    if let Err(e) = storage::migrate_if_needed().await {
        log::error(&e.to_string());
    }
    ensure_offscreen().await.map_err(|e| {
        let e = e.to_string();
        log::error(&e);
        JsValue::from_str(&e)
    })
}

/// `chrome.storage.onChanged` for `sync.settings`: an item in the old format (written by an
/// older version on another device) is migrated at once.
#[wasm_bindgen]
pub async fn on_settings_changed() {
    if let Err(e) = storage::migrate_if_needed().await {
        log::error(&e.to_string());
    }
}

/// `chrome.commands.onCommand` and `chrome.action.onClicked`: the keyboard command (or the
/// toolbar button) opens or closes the panel in the tab it was used in.
#[wasm_bindgen]
pub async fn on_command(command: String, tab_id: Option<f64>) {
    if command != TOGGLE_COMMAND {
        log::warn(&format!("unknown command {command:?}"));
        return;
    }
    let Some(tab_id) = tab_id.filter(|t| t.fract() == 0.0 && *t >= 0.0) else {
        log::debug("the command was used without a tab");
        return;
    };
    if let Err(e) = panel_command(tab_id as i64, PanelAction::Toggle).await {
        // Pages without our content script (chrome://, the Web Store, PDF viewers...).
        log::info(&format!("no Gemma Gem on this page: {e}"));
    }
}

async fn panel_command(tab_id: i64, action: PanelAction) -> Result<(), Error> {
    let env = Envelope::new(
        next_id(),
        Context::ServiceWorker,
        ContentCommand::PanelCommand { action },
    );
    match gg_chrome::send_to_tab::<_, ContentReply>(tab_id, &env).await? {
        Envelope {
            from: Context::Content,
            body: ContentReply::Ack,
            ..
        } => Ok(()),
        other => Err(Error::UnexpectedAnswer(format!("{:?}", other.body))),
    }
}

/// The answer enums of the channels the service worker answers: each has an `Error` variant.
trait Answer: serde::Serialize {
    fn error(message: String) -> Self;
}

impl Answer for OverlayAnswer {
    fn error(message: String) -> Self {
        Self::Error { message }
    }
}

impl Answer for ContentAnswer {
    fn error(message: String) -> Self {
        Self::Error { message }
    }
}

impl Answer for OffscreenAnswer {
    fn error(message: String) -> Self {
        Self::Error { message }
    }
}

/// `chrome.runtime.onMessage`: every message is parsed, its sender checked, then its body parsed
/// as the request enum of the channel that sender speaks on and handled by that channel's
/// handler. Returns the answer envelope (or `undefined` for messages that are not ours).
#[wasm_bindgen]
pub async fn on_message(message: JsValue, sender: JsValue) -> Result<JsValue, JsValue> {
    let env = match gg_chrome::from_js(&message)
        .and_then(|j| Envelope::<Value>::from_json(j).map_err(|e| e.to_string()))
    {
        Ok(env) => env,
        Err(e) => {
            log::warn(&format!("ignored message: {e}"));
            return Ok(JsValue::UNDEFINED);
        }
    };
    let sender = gg_chrome::sender_info(&sender);
    // The context is the one Chrome's sender proves, not only the one the envelope claims.
    if let Err(e) = sender.check(&gg_chrome::extension_id(), env.from) {
        log::warn(&e.to_string());
        return reply(env.id, OverlayAnswer::error(e.to_string()));
    }
    let id = env.id;
    match env.from {
        Context::Overlay => reply(id, from_overlay(env, &sender).await),
        Context::Content => reply(id, from_content(env, &sender).await),
        Context::Offscreen => reply(id, from_offscreen(env).await),
        // Chrome does not hand a context its own messages.
        Context::ServiceWorker => {
            log::warn("ignored message: the service worker does not talk to itself");
            Ok(JsValue::UNDEFINED)
        }
    }
}

fn reply<A: serde::Serialize>(id: RequestId, body: A) -> Result<JsValue, JsValue> {
    Ok(gg_chrome::into_js(&Envelope::new(
        id,
        Context::ServiceWorker,
        body,
    ))?)
}

/// The body of `env` as the request enum `R` of its channel; a body of another channel (or
/// none of ours) is refused here.
fn parse<R: serde::de::DeserializeOwned, A: Answer>(env: Envelope<Value>) -> Result<R, A> {
    let from = env.from;
    env.parse_body::<R>().map(|env| env.body).map_err(|e| {
        let message = format!("refused a message from {from:?}: {e}");
        log::warn(&message);
        A::error(message)
    })
}

/// The answer to a request, or its error (logged).
fn answered<A: Answer>(result: Result<A, Error>) -> A {
    result.unwrap_or_else(|e| {
        let message = e.to_string();
        match e {
            Error::Gate(_) => log::warn(&message),
            _ => log::error(&message),
        }
        A::error(message)
    })
}

/// The overlay channel. Until an overlay has presented its tab's token it gets nothing but the
/// gate's refusal ([`overlay_gate`]).
async fn from_overlay(env: Envelope<Value>, sender: &SenderInfo) -> OverlayAnswer {
    let request = match parse::<OverlayRequest, _>(env) {
        Ok(request) => request,
        Err(refused) => return refused,
    };
    answered(match request {
        OverlayRequest::ActivateOverlay { token } => overlay_gate::activate(sender, &token)
            .await
            .map(|()| OverlayAnswer::Ack)
            .map_err(Error::from),
        request => match overlay_gate::check(sender).await {
            Ok(()) => overlay_request(request, sender).await,
            Err(e) => Err(e.into()),
        },
    })
}

/// The content script channel.
async fn from_content(env: Envelope<Value>, sender: &SenderInfo) -> ContentAnswer {
    let request = match parse::<ContentRequest, _>(env) {
        Ok(request) => request,
        Err(refused) => return refused,
    };
    answered(match request {
        ContentRequest::OverlayTokenRequest => overlay_gate::issue(sender)
            .await
            .map(|token| ContentAnswer::OverlayToken { token })
            .map_err(Error::from),
        // A tab's content script failed inside the page and its loader restarted it.
        ContentRequest::ContentCrashed { detail } => {
            let tab = sender.tab.as_ref().and_then(|t| t.id).unwrap_or(-1);
            log::error(&format!(
                "the page tools of tab {tab} crashed and were restarted: {detail}"
            ));
            Ok(ContentAnswer::Ack)
        }
        ContentRequest::GetStatus => status().await.map(ContentAnswer::Status),
    })
}

/// The offscreen channel: its requests, and its broadcasts (for the overlays; nothing to do
/// here but acknowledge them).
async fn from_offscreen(env: Envelope<Value>) -> OffscreenAnswer {
    if env
        .body_type()
        .is_some_and(|t| Broadcast::TYPES.contains(&t))
    {
        return match parse::<Broadcast, _>(env) {
            Ok(_) => OffscreenAnswer::Ack,
            Err(refused) => refused,
        };
    }
    match parse::<OffscreenRequest, _>(env) {
        Ok(request) => answered(offscreen_request(request).await),
        Err(refused) => refused,
    }
}

/// The tab a message came from (an error for a message from no tab).
pub(crate) fn sender_tab(sender: &SenderInfo) -> Result<i64, NoTab> {
    sender.tab.as_ref().and_then(|t| t.id).ok_or(NoTab)
}

/// Sends a request to the offscreen document (creating it if needed) and returns its answer.
async fn to_offscreen(command: OffscreenCommand) -> Result<OffscreenReply, Error> {
    ensure_offscreen().await?;
    let answer =
        gg_chrome::send::<_, OffscreenReply>(Context::ServiceWorker, next_id(), command).await?;
    match answer {
        Some(env) if env.from == Context::Offscreen => match env.body {
            OffscreenReply::Error { message } => Err(Error::Offscreen(message)),
            body => Ok(body),
        },
        Some(env) => Err(Error::AnswerFrom(env.from)),
        None => Err(Error::OffscreenSilent),
    }
}

/// An answer of the offscreen document, handed on to the overlay that asked.
async fn to_offscreen_for_overlay(command: OffscreenCommand) -> Result<OverlayAnswer, Error> {
    match to_offscreen(command).await? {
        OffscreenReply::Ack => Ok(OverlayAnswer::Ack),
        OffscreenReply::Conversation(c) => Ok(OverlayAnswer::Conversation(c)),
        OffscreenReply::ModelStatus(report) => Ok(OverlayAnswer::ModelStatus(report)),
        OffscreenReply::StoredModels { models } => Ok(OverlayAnswer::StoredModels { models }),
        OffscreenReply::Error { message } => Err(Error::Offscreen(message)),
        other @ (OffscreenReply::Pong | OffscreenReply::DevGreedyResult(_)) => {
            Err(Error::UnexpectedAnswer(format!("{other:?}")))
        }
    }
}

/// What the service worker knows about the extension (the offscreen document is started first).
async fn status() -> Result<StatusReport, Error> {
    ensure_offscreen().await?;
    let adapter: Option<AdapterReport> = gg_chrome::session_get(OFFSCREEN_STATUS_KEY)
        .await?
        .and_then(|v| serde_json::from_value(v).ok());
    let offscreen_alive = gg_chrome::offscreen_exists().await?;
    Ok(StatusReport {
        offscreen_alive,
        adapter,
    })
}

/// The requests of a tab's overlay (activated: [`overlay_gate::check`] passed). The tab is the
/// one Chrome says the message came from.
async fn overlay_request(
    request: OverlayRequest,
    sender: &SenderInfo,
) -> Result<OverlayAnswer, Error> {
    match request {
        // Answered by the gate before.
        OverlayRequest::ActivateOverlay { .. } => Ok(OverlayAnswer::Ack),
        OverlayRequest::ChatSend { text, images } => {
            let tab_id = sender_tab(sender)?;
            gg_agent::ImagePart::check_user_images(&images).map_err(Error::Images)?;
            // The turn is bound to the document the tab shows now; every call of it goes there.
            let top = gg_chrome::top_frame(tab_id)
                .await
                .map_err(Error::NoTopFrame)?;
            let binding = PageBinding {
                document_id: top.document_id,
                origin: origin_of(&top.url),
            };
            let s = storage::settings().await;
            gg_messages::storage::check_model_source(&s.model_source, &s.confirmed_http_mirror)?;
            restore_if_needed(tab_id, &binding.origin).await?;
            to_offscreen_for_overlay(OffscreenCommand::RunTurn {
                tab_id,
                text,
                images,
                image_tokens: s.image_tokens,
                constrain_tool_calls: s.constrain_tool_calls,
                model_source: s.model_source,
                model_size: s.model_size,
                max_iterations: s.max_iterations,
                thinking: s.thinking,
                temperature: s.temperature,
                site_permissions: storage::site_permissions().await,
                binding,
            })
            .await
        }
        OverlayRequest::ChatStop => {
            to_offscreen_for_overlay(OffscreenCommand::CancelTurn {
                tab_id: sender_tab(sender)?,
            })
            .await
        }
        OverlayRequest::ChatNew => {
            let tab_id = sender_tab(sender)?;
            let origin = page_origin(tab_id).await?;
            gg_chrome::session_remove(&conversation_key(tab_id, &origin)).await?;
            to_offscreen_for_overlay(OffscreenCommand::ClearConversation { tab_id, origin }).await
        }
        OverlayRequest::ChatApproval {
            call_id,
            nonce,
            decision,
        } => {
            to_offscreen_for_overlay(OffscreenCommand::ApprovalAnswer {
                tab_id: sender_tab(sender)?,
                call_id,
                nonce,
                decision,
            })
            .await
        }
        OverlayRequest::ClosePanel => {
            panel_command(sender_tab(sender)?, PanelAction::Close).await?;
            Ok(OverlayAnswer::Ack)
        }
        OverlayRequest::GetPageSite => {
            let url = gg_chrome::tab_url(sender_tab(sender)?).await?;
            Ok(OverlayAnswer::Site {
                site: origin_of(&url),
            })
        }
        // Settings and per-site data: written here only, each request checked.
        OverlayRequest::SaveSettings { settings } => {
            storage::save_settings(settings).await?;
            Ok(OverlayAnswer::Ack)
        }
        OverlayRequest::SetSiteDisabled { site, disabled } => {
            storage::set_site_disabled(site, disabled).await?;
            Ok(OverlayAnswer::Ack)
        }
        OverlayRequest::GrantSitePermission { site, permission } => {
            storage::grant(&site, permission, sender).await?;
            Ok(OverlayAnswer::Ack)
        }
        OverlayRequest::RevokeSitePermission { site, permission } => {
            storage::revoke(&site, &permission).await?;
            Ok(OverlayAnswer::Ack)
        }
        OverlayRequest::GetConversation => {
            // The conversation this tab had with the origin it shows now.
            let tab_id = sender_tab(sender)?;
            let origin = page_origin(tab_id).await?;
            restore_if_needed(tab_id, &origin).await?;
            to_offscreen_for_overlay(OffscreenCommand::GetTabConversation { tab_id, origin }).await
        }
        OverlayRequest::GetModelStatus => {
            to_offscreen_for_overlay(OffscreenCommand::GetModelStatus).await
        }
        OverlayRequest::GetStoredModels { repositories } => {
            to_offscreen_for_overlay(OffscreenCommand::GetStoredModels { repositories }).await
        }
        OverlayRequest::ClearModel { repository } => {
            to_offscreen_for_overlay(OffscreenCommand::ClearModel { repository }).await
        }
        OverlayRequest::GetStatus => Ok(OverlayAnswer::Status(status().await?)),
    }
}

/// A content script's answer to a command, handed on to the offscreen document that asked.
fn from_page(reply: ContentReply) -> OffscreenAnswer {
    match reply {
        ContentReply::Ack => OffscreenAnswer::Ack,
        ContentReply::ToolOutcome { call_id, result } => {
            OffscreenAnswer::ToolOutcome { call_id, result }
        }
        ContentReply::ElementFacts { result } => OffscreenAnswer::ElementFacts { result },
    }
}

/// The requests of the offscreen document: its agent needs the page (every call names the
/// document its turn is bound to, and reaches that document only), and its conversations are
/// stored here.
async fn offscreen_request(request: OffscreenRequest) -> Result<OffscreenAnswer, Error> {
    match request {
        OffscreenRequest::OffscreenReady => {
            log::debug("offscreen document ready");
            Ok(OffscreenAnswer::Ack)
        }
        OffscreenRequest::AdapterReport(report) => {
            match (&report.adapter, &report.error) {
                (Some(a), _) => log::info(&format!(
                    "WebGPU adapter: {} {} {}",
                    a.vendor, a.architecture, a.device
                )),
                (None, Some(e)) => log::error(&format!("WebGPU unavailable: {e}")),
                (None, None) => log::error("WebGPU unavailable"),
            }
            let json = serde_json::to_value(&report)?;
            gg_chrome::session_set(OFFSCREEN_STATUS_KEY, &json).await?;
            Ok(OffscreenAnswer::Ack)
        }
        OffscreenRequest::GetStatus => Ok(OffscreenAnswer::Status(status().await?)),
        OffscreenRequest::TabToolCall {
            tab_id,
            document_id,
            call_id,
            call,
        } => {
            // A site the user turned Gemma Gem off on gets no tool at all, whatever runs it
            // (screenshots and run_javascript are the service worker's own).
            if disabled_here(tab_id).await {
                return Ok(OffscreenAnswer::ToolOutcome {
                    call_id,
                    result: Err(gg_agent::ToolError::denied(
                        "Gemma Gem is turned off on this site by the user; no tool can run here",
                    )),
                });
            }
            if call.name == "take_screenshot" {
                return Ok(OffscreenAnswer::ToolOutcome {
                    call_id,
                    result: tools::take_screenshot(tab_id, &document_id).await,
                });
            }
            if call.name == "run_javascript" {
                let code = call
                    .args
                    .get("code")
                    .and_then(|c| c.as_str())
                    .unwrap_or_default()
                    .to_owned();
                return Ok(OffscreenAnswer::ToolOutcome {
                    call_id,
                    result: tools::run_javascript(tab_id, &document_id, &code).await,
                });
            }
            let answer = gg_chrome::send_to_document::<_, ContentReply>(
                tab_id,
                &document_id,
                &Envelope::new(
                    next_id(),
                    Context::ServiceWorker,
                    ContentCommand::ExecuteTool {
                        call_id: call_id.clone(),
                        call,
                    },
                ),
            )
            .await;
            Ok(match answer {
                Ok(env) => from_page(env.body),
                Err(e) => OffscreenAnswer::ToolOutcome {
                    call_id,
                    result: Err(page_unreachable(&e)),
                },
            })
        }
        OffscreenRequest::TabElementFacts {
            tab_id,
            document_id,
            target,
        } => {
            let answer = gg_chrome::send_to_document::<_, ContentReply>(
                tab_id,
                &document_id,
                &Envelope::new(
                    next_id(),
                    Context::ServiceWorker,
                    ContentCommand::GetElementFacts { target },
                ),
            )
            .await;
            Ok(match answer {
                Ok(env) => from_page(env.body),
                Err(e) => OffscreenAnswer::ElementFacts {
                    result: Err(page_unreachable(&e)),
                },
            })
        }
        OffscreenRequest::TabSite {
            tab_id,
            document_id,
        } => {
            let top = gg_chrome::top_frame(tab_id).await?;
            if top.document_id != document_id {
                return Err(Error::PageChanged);
            }
            Ok(OffscreenAnswer::Site {
                site: origin_of(&top.url),
            })
        }
        OffscreenRequest::ConversationSnapshot {
            tab_id,
            origin,
            messages,
        } => {
            let json = serde_json::to_value(&messages)?;
            gg_chrome::session_set(
                &conversation_key(tab_id, &gg_agent::site_key(&origin)),
                &json,
            )
            .await?;
            Ok(OffscreenAnswer::Ack)
        }
    }
}

/// Whether the user turned Gemma Gem off on the host of the page `tab_id` shows (a tab that
/// cannot be asked is left to the call itself, which then fails to reach its document).
async fn disabled_here(tab_id: i64) -> bool {
    match gg_chrome::top_frame(tab_id).await {
        Ok(top) => storage::is_disabled(&top.url).await,
        Err(_) => false,
    }
}

/// What the model is told when the bound document is gone.
const PAGE_CHANGED: &str = "the page changed: the tab no longer shows the page this task started on, so \
     nothing more runs there";

fn page_unreachable(e: &gg_chrome::ChromeError) -> gg_agent::ToolError {
    let message = if e.message.contains("No tab with id") || e.message.contains("document") {
        format!("{PAGE_CHANGED} ({})", e.message)
    } else {
        format!(
            "the page did not answer ({e}); it may still be loading or may not allow extensions"
        )
    };
    gg_agent::ToolError::new(gg_agent::ToolErrorKind::Unavailable, message)
}

/// `webNavigation.onCommitted` and `onHistoryStateUpdated` (registered in `background.js`): the
/// top frame of a tab changed. A running turn bound to another document (or origin) is stopped
/// by the offscreen document; nothing happens when there is no offscreen document (no turn).
#[wasm_bindgen]
pub async fn on_navigation(
    tab_id: f64,
    frame_id: f64,
    document_id: String,
    url: String,
    same_document: bool,
) {
    if frame_id != 0.0 || tab_id < 0.0 || tab_id.fract() != 0.0 {
        return;
    }
    match gg_chrome::offscreen_exists().await {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            log::warn(&e.to_string());
            return;
        }
    }
    let body = OffscreenCommand::PageChanged {
        tab_id: tab_id as i64,
        document_id,
        url,
        same_document,
    };
    if let Err(e) =
        gg_chrome::send::<_, OffscreenReply>(Context::ServiceWorker, next_id(), body).await
    {
        log::warn(&format!("could not report a navigation: {e}"));
    }
}

/// `chrome.tabs.onRemoved`: a closed tab's conversations leave session storage and the
/// offscreen document forgets the tab (its turn, if one runs, stops).
#[wasm_bindgen]
pub async fn on_tab_removed(tab_id: f64) {
    if tab_id < 0.0 || tab_id.fract() != 0.0 {
        return;
    }
    let tab_id = tab_id as i64;
    let prefix = gg_messages::conversation_prefix(tab_id);
    match gg_chrome::session_keys().await {
        Ok(keys) => {
            for key in keys.iter().filter(|k| k.starts_with(&prefix)) {
                if let Err(e) = gg_chrome::session_remove(key).await {
                    log::warn(&format!("could not free {key}: {e}"));
                }
            }
        }
        Err(e) => log::warn(&e.to_string()),
    }
    overlay_gate::forget(tab_id).await;
    if matches!(gg_chrome::offscreen_exists().await, Ok(true))
        && let Err(e) = gg_chrome::send::<_, OffscreenReply>(
            Context::ServiceWorker,
            next_id(),
            OffscreenCommand::ForgetTab { tab_id },
        )
        .await
    {
        log::warn(&format!(
            "could not tell the offscreen document about tab {tab_id}: {e}"
        ));
    }
}

/// `scheme://host[:port]` of a URL (empty for URLs without one).
fn origin_of(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return String::new();
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    format!("{scheme}://{host}")
}

/// The origin (normalized) of the page a tab shows now.
async fn page_origin(tab_id: i64) -> Result<String, Error> {
    let top = gg_chrome::top_frame(tab_id)
        .await
        .map_err(Error::NoTopFrame)?;
    Ok(gg_agent::site_key(&origin_of(&top.url)))
}

/// After the offscreen document was recreated it has no conversations: give it the stored one
/// of `origin`.
async fn restore_if_needed(tab_id: i64, origin: &str) -> Result<(), Error> {
    let origin = gg_agent::site_key(origin);
    let Some(stored) = gg_chrome::session_get(&conversation_key(tab_id, &origin)).await? else {
        return Ok(());
    };
    let messages: Vec<gg_agent::ChatMessage> =
        serde_json::from_value(stored).map_err(Error::StoredConversation)?;
    to_offscreen(OffscreenCommand::RestoreConversation {
        tab_id,
        origin,
        messages,
    })
    .await
    .map(|_| ())
}

/// Creates the offscreen document unless it is already there, then waits until its wasm answers.
/// Two callers racing is harmless: Chrome refuses the second creation, which we accept.
async fn ensure_offscreen() -> Result<(), Error> {
    if !gg_chrome::offscreen_exists().await? {
        create_offscreen().await?;
    }
    // The document may exist before its wasm has registered its listener: wait for an answer.
    for _ in 0..100 {
        if let Ok(Some(env)) = gg_chrome::send::<_, OffscreenReply>(
            Context::ServiceWorker,
            next_id(),
            OffscreenCommand::Ping,
        )
        .await
            && env.body == OffscreenReply::Pong
        {
            return Ok(());
        }
        gloo_timers::future::TimeoutFuture::new(100).await;
    }
    Err(Error::OffscreenNotStarted)
}

async fn create_offscreen() -> Result<(), ChromeError> {
    match gg_chrome::create_offscreen(
        OFFSCREEN_PATH,
        "Runs the on-device language model on WebGPU.",
    )
    .await
    {
        Ok(()) => {
            log::info("offscreen document created");
            Ok(())
        }
        Err(e) if e.message.contains("single offscreen") => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::origin_of;

    #[test]
    fn origins() {
        assert_eq!(
            origin_of("https://a.example:8443/x?y#z"),
            "https://a.example:8443"
        );
        assert_eq!(origin_of("http://127.0.0.1:9000/"), "http://127.0.0.1:9000");
        assert_eq!(origin_of("about:blank"), "");
    }
}
