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

use gg_chrome::log;
use gg_messages::{
    AdapterReport, Body, Context, Envelope, OFFSCREEN_STATUS_KEY, PageBinding, PanelAction,
    RequestId, SenderInfo, StatusReport, TOGGLE_COMMAND, conversation_key,
};
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
        log::error(&e);
    }
    ensure_offscreen().await.map_err(|e| {
        log::error(&e);
        JsValue::from_str(&e)
    })
}

/// `chrome.storage.onChanged` for `sync.settings`: an item in the old format (written by an
/// older version on another device) is migrated at once.
#[wasm_bindgen]
pub async fn on_settings_changed() {
    if let Err(e) = storage::migrate_if_needed().await {
        log::error(&e);
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

async fn panel_command(tab_id: i64, action: PanelAction) -> Result<(), String> {
    let env = Envelope::new(
        next_id(),
        Context::ServiceWorker,
        Body::PanelCommand { action },
    );
    match gg_chrome::send_to_tab(tab_id, &env).await {
        Ok(Envelope {
            from: Context::Content,
            body: Body::Ack,
            ..
        }) => Ok(()),
        Ok(other) => Err(format!("unexpected answer {:?}", other.body)),
        Err(e) => Err(e.to_string()),
    }
}

/// `chrome.runtime.onMessage`: every message is parsed, its sender checked, then routed.
/// Returns the answer envelope (or `undefined` for messages that are not ours).
#[wasm_bindgen]
pub async fn on_message(message: JsValue, sender: JsValue) -> Result<JsValue, JsValue> {
    let env = match gg_chrome::from_js(&message)
        .map_err(|e| e.to_string())
        .and_then(|j| Envelope::from_json(j).map_err(|e| e.to_string()))
    {
        Ok(env) => env,
        Err(e) => {
            log::warn(&format!("ignored message: {e}"));
            return Ok(JsValue::UNDEFINED);
        }
    };
    let sender = gg_chrome::sender_info(&sender);
    if let Err(e) = sender.check(&gg_chrome::extension_id(), env.from) {
        log::warn(&e.to_string());
        return reply(
            &env,
            Body::Error {
                message: e.to_string(),
            },
        );
    }
    // Overlay tokens, and overlays that did not present one.
    if let Some(body) = overlay_gate::gate(env.from, &env.body, &sender).await {
        return reply(&env, body);
    }
    let body = match handle(&env, &sender).await {
        Ok(body) => body,
        Err(e) => {
            log::error(&e);
            Body::Error { message: e }
        }
    };
    reply(&env, body)
}

fn reply(to: &Envelope, body: Body) -> Result<JsValue, JsValue> {
    Ok(gg_chrome::into_js(&Envelope::new(
        to.id,
        Context::ServiceWorker,
        body,
    ))?)
}

/// The tab a message came from (an error for a message from no tab).
pub(crate) fn sender_tab(sender: &SenderInfo) -> Result<i64, String> {
    sender
        .tab
        .as_ref()
        .and_then(|t| t.id)
        .ok_or_else(|| "this message must come from a tab".to_owned())
}

/// Sends a request to the offscreen document (creating it if needed) and returns its answer.
async fn to_offscreen(body: Body) -> Result<Body, String> {
    ensure_offscreen().await?;
    let answer = gg_chrome::send(Context::ServiceWorker, next_id(), body)
        .await
        .map_err(|e| e.to_string())?;
    match answer {
        Some(env) if env.from == Context::Offscreen => match env.body {
            Body::Error { message } => Err(message),
            body => Ok(body),
        },
        Some(env) => Err(format!("unexpected answer from {:?}", env.from)),
        None => Err("the offscreen document did not answer".into()),
    }
}

async fn handle(env: &Envelope, sender: &SenderInfo) -> Result<Body, String> {
    match (env.from, env.body.clone()) {
        (Context::Offscreen, Body::OffscreenReady) => {
            log::debug("offscreen document ready");
            Ok(Body::Ack)
        }
        (Context::Offscreen, Body::AdapterReport(report)) => {
            match (&report.adapter, &report.error) {
                (Some(a), _) => log::info(&format!(
                    "WebGPU adapter: {} {} {}",
                    a.vendor, a.architecture, a.device
                )),
                (None, Some(e)) => log::error(&format!("WebGPU unavailable: {e}")),
                (None, None) => log::error("WebGPU unavailable"),
            }
            let json = serde_json::to_value(&report).map_err(|e| e.to_string())?;
            gg_chrome::session_set(OFFSCREEN_STATUS_KEY, &json)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Body::Ack)
        }
        (_, Body::GetStatus) => {
            ensure_offscreen().await?;
            let adapter: Option<AdapterReport> = gg_chrome::session_get(OFFSCREEN_STATUS_KEY)
                .await
                .map_err(|e| e.to_string())?
                .and_then(|v| serde_json::from_value(v).ok());
            let offscreen_alive = gg_chrome::offscreen_exists()
                .await
                .map_err(|e| e.to_string())?;
            Ok(Body::Status(StatusReport {
                offscreen_alive,
                adapter,
            }))
        }

        // A tab's content script failed inside the page and its loader restarted it.
        (Context::Content, Body::ContentCrashed { detail }) => {
            let tab = sender.tab.as_ref().and_then(|t| t.id).unwrap_or(-1);
            log::error(&format!(
                "the page tools of tab {tab} crashed and were restarted: {detail}"
            ));
            Ok(Body::Ack)
        }

        // The overlay of a tab: the tab is the one Chrome says the message came from.
        (Context::Overlay, Body::ChatSend { text }) => {
            let tab_id = sender_tab(sender)?;
            // The turn is bound to the document the tab shows now; every call of it goes there.
            let top = gg_chrome::top_frame(tab_id)
                .await
                .map_err(|e| format!("cannot tell which page this tab shows: {e}"))?;
            let binding = PageBinding {
                document_id: top.document_id,
                origin: origin_of(&top.url),
            };
            let s = storage::settings().await;
            gg_messages::storage::check_model_source(&s.model_source, &s.confirmed_http_mirror)?;
            restore_if_needed(tab_id, &binding.origin).await?;
            to_offscreen(Body::RunTurn {
                tab_id,
                text,
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
        (Context::Overlay, Body::ChatStop) => {
            to_offscreen(Body::CancelTurn {
                tab_id: sender_tab(sender)?,
            })
            .await
        }
        (Context::Overlay, Body::ChatNew) => {
            let tab_id = sender_tab(sender)?;
            let origin = page_origin(tab_id).await?;
            gg_chrome::session_remove(&conversation_key(tab_id, &origin))
                .await
                .map_err(|e| e.to_string())?;
            to_offscreen(Body::ClearConversation { tab_id, origin }).await
        }
        (
            Context::Overlay,
            Body::ChatApproval {
                call_id,
                nonce,
                decision,
            },
        ) => {
            to_offscreen(Body::ApprovalAnswer {
                tab_id: sender_tab(sender)?,
                call_id,
                nonce,
                decision,
            })
            .await
        }
        (Context::Overlay, Body::ClosePanel) => {
            panel_command(sender_tab(sender)?, PanelAction::Close).await?;
            Ok(Body::Ack)
        }
        (Context::Overlay, Body::GetPageSite) => {
            let url = gg_chrome::tab_url(sender_tab(sender)?)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Body::Site {
                site: origin_of(&url),
            })
        }
        // Settings and per-site data: written here only, each request checked.
        (Context::Overlay, body) if storage::is_request(&body) => {
            storage::handle(body, sender).await
        }
        (Context::Overlay, Body::GetConversation) => {
            // The conversation this tab had with the origin it shows now.
            let tab_id = sender_tab(sender)?;
            let origin = page_origin(tab_id).await?;
            restore_if_needed(tab_id, &origin).await?;
            to_offscreen(Body::GetTabConversation { tab_id, origin }).await
        }

        // A site the user turned Gemma Gem off on gets no tool at all, whatever runs it
        // (screenshots and run_javascript are the service worker's own).
        (
            Context::Offscreen,
            Body::TabToolCall {
                tab_id, call_id, ..
            },
        ) if disabled_here(tab_id).await => Ok(Body::ToolOutcome {
            call_id,
            result: Err(gg_agent::ToolError::denied(
                "Gemma Gem is turned off on this site by the user; no tool can run here",
            )),
        }),
        // The offscreen document's agent needs the page: every call names the document its turn
        // is bound to, and reaches that document only.
        (
            Context::Offscreen,
            Body::TabToolCall {
                tab_id,
                document_id,
                call_id,
                call,
            },
        ) if call.name == "take_screenshot" => Ok(Body::ToolOutcome {
            call_id,
            result: tools::take_screenshot(tab_id, &document_id).await,
        }),
        (
            Context::Offscreen,
            Body::TabToolCall {
                tab_id,
                document_id,
                call_id,
                call,
            },
        ) if call.name == "run_javascript" => {
            let code = call
                .args
                .get("code")
                .and_then(|c| c.as_str())
                .unwrap_or_default()
                .to_owned();
            Ok(Body::ToolOutcome {
                call_id,
                result: tools::run_javascript(tab_id, &document_id, &code).await,
            })
        }
        (
            Context::Offscreen,
            Body::TabToolCall {
                tab_id,
                document_id,
                call_id,
                call,
            },
        ) => {
            let answer = gg_chrome::send_to_document(
                tab_id,
                &document_id,
                &Envelope::new(
                    next_id(),
                    Context::ServiceWorker,
                    Body::ExecuteTool {
                        call_id: call_id.clone(),
                        call,
                    },
                ),
            )
            .await;
            Ok(match answer {
                Ok(env) => env.body,
                Err(e) => Body::ToolOutcome {
                    call_id,
                    result: Err(page_unreachable(&e)),
                },
            })
        }
        (
            Context::Offscreen,
            Body::TabElementFacts {
                tab_id,
                document_id,
                target,
            },
        ) => {
            let answer = gg_chrome::send_to_document(
                tab_id,
                &document_id,
                &Envelope::new(
                    next_id(),
                    Context::ServiceWorker,
                    Body::GetElementFacts { target },
                ),
            )
            .await;
            Ok(match answer {
                Ok(env) => env.body,
                Err(e) => Body::ElementFacts {
                    result: Err(page_unreachable(&e)),
                },
            })
        }
        (
            Context::Offscreen,
            Body::TabSite {
                tab_id,
                document_id,
            },
        ) => {
            let top = gg_chrome::top_frame(tab_id)
                .await
                .map_err(|e| e.to_string())?;
            if top.document_id != document_id {
                return Err(PAGE_CHANGED.into());
            }
            Ok(Body::Site {
                site: origin_of(&top.url),
            })
        }
        (
            Context::Offscreen,
            Body::ConversationSnapshot {
                tab_id,
                origin,
                messages,
            },
        ) => {
            let json = serde_json::to_value(&messages).map_err(|e| e.to_string())?;
            gg_chrome::session_set(
                &conversation_key(tab_id, &gg_agent::site_key(&origin)),
                &json,
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(Body::Ack)
        }
        (Context::Overlay, Body::GetModelStatus) => to_offscreen(Body::GetModelStatus).await,
        (Context::Overlay, body @ (Body::GetStoredModels { .. } | Body::ClearModel { .. })) => {
            to_offscreen(body).await
        }
        // Broadcasts for the overlays; nothing to do here.
        (Context::Offscreen, Body::AgentEvent { .. } | Body::ModelStatus(_)) => Ok(Body::Ack),
        (from, other) => Err(format!("unexpected message {other:?} from {from:?}")),
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
    let body = Body::PageChanged {
        tab_id: tab_id as i64,
        document_id,
        url,
        same_document,
    };
    if let Err(e) = gg_chrome::send(Context::ServiceWorker, next_id(), body).await {
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
        && let Err(e) = gg_chrome::send(
            Context::ServiceWorker,
            next_id(),
            Body::ForgetTab { tab_id },
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
async fn page_origin(tab_id: i64) -> Result<String, String> {
    let top = gg_chrome::top_frame(tab_id)
        .await
        .map_err(|e| format!("cannot tell which page this tab shows: {e}"))?;
    Ok(gg_agent::site_key(&origin_of(&top.url)))
}

/// After the offscreen document was recreated it has no conversations: give it the stored one
/// of `origin`.
async fn restore_if_needed(tab_id: i64, origin: &str) -> Result<(), String> {
    let origin = gg_agent::site_key(origin);
    let Some(stored) = gg_chrome::session_get(&conversation_key(tab_id, &origin))
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(());
    };
    let messages: Vec<gg_agent::ChatMessage> = serde_json::from_value(stored)
        .map_err(|e| format!("stored conversation unreadable: {e}"))?;
    to_offscreen(Body::RestoreConversation {
        tab_id,
        origin,
        messages,
    })
    .await
    .map(|_| ())
}

/// Creates the offscreen document unless it is already there, then waits until its wasm answers.
/// Two callers racing is harmless: Chrome refuses the second creation, which we accept.
async fn ensure_offscreen() -> Result<(), String> {
    if !gg_chrome::offscreen_exists()
        .await
        .map_err(|e| e.to_string())?
    {
        create_offscreen().await?;
    }
    // The document may exist before its wasm has registered its listener: wait for an answer.
    for _ in 0..100 {
        if let Ok(Some(env)) = gg_chrome::send(Context::ServiceWorker, next_id(), Body::Ping).await
            && env.body == Body::Pong
        {
            return Ok(());
        }
        gloo_timers::future::TimeoutFuture::new(100).await;
    }
    Err("the offscreen document did not start within 10 s".into())
}

async fn create_offscreen() -> Result<(), String> {
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
        Err(e) => Err(e.to_string()),
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
