//! The extension's service worker (module worker). `background.js` registers the Chrome event
//! listeners synchronously (as MV3 requires) and forwards each event to the exports below once the
//! wasm module has loaded.

use gg_chrome::log;
use gg_messages::{AdapterReport, Body, Context, Envelope, OFFSCREEN_STATUS_KEY, StatusReport};
use wasm_bindgen::prelude::*;

const OFFSCREEN_PATH: &str = "offscreen/offscreen.html";

/// Called once when the module has loaded.
#[wasm_bindgen]
pub fn start() {
    log::info("service worker started");
}

/// `chrome.runtime.onInstalled` / `onStartup`: bring the offscreen document up early so the first
/// message does not wait for it.
#[wasm_bindgen]
pub async fn on_startup() -> Result<(), JsValue> {
    ensure_offscreen().await.map_err(|e| {
        log::error(&e.to_string());
        JsValue::from(e)
    })
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
    let body = match handle(env.from, env.body.clone()).await {
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

async fn handle(from: Context, body: Body) -> Result<Body, String> {
    match (from, body) {
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
            ensure_offscreen().await.map_err(|e| e.to_string())?;
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
        (from, other) => Err(format!("unexpected message {other:?} from {from:?}")),
    }
}

/// Creates the offscreen document unless it is already there. Two callers racing is harmless:
/// Chrome refuses the second creation, which we recognise and accept.
async fn ensure_offscreen() -> Result<(), gg_chrome::ChromeError> {
    if gg_chrome::offscreen_exists().await? {
        return Ok(());
    }
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
