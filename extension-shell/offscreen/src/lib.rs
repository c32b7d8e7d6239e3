//! The offscreen document: hosts the model and the agent loop, one conversation per tab.
//!
//! It only talks to the service worker (`chrome.runtime` is the only extension API offscreen
//! documents have): requests arrive from it, page tools and element facts go through it, and the
//! agent's events are broadcast to the overlays (each shows its own tab's events) with a sequence
//! number per tab.
//!
//! The model itself (WebGPU, downloads, the loaded model) is hosted by `gg-web`, shared with the
//! embeddable widget's worker; this crate installs where its reports go (a broadcast to every
//! extension context).

mod host;

use gg_chrome::log;
use gg_messages::{
    Broadcast, Context, Envelope, OffscreenAnswer, OffscreenCommand, OffscreenReply,
    OffscreenRequest, RequestId,
};
use wasm_bindgen::prelude::*;

/// Called by `offscreen.js` once the module has loaded.
#[wasm_bindgen]
pub async fn start() -> Result<(), JsValue> {
    log::info("offscreen document started");
    gg_web::model::set_status_sink(|report| {
        let seq = report.seq;
        wasm_bindgen_futures::spawn_local(async move {
            if let Err(e) = gg_chrome::send::<_, OffscreenAnswer>(
                Context::Offscreen,
                RequestId(seq),
                Broadcast::ModelStatus(report),
            )
            .await
            {
                log::debug(&format!("model status not delivered: {e}"));
            }
        });
    });
    gg_chrome::send::<_, OffscreenAnswer>(
        Context::Offscreen,
        RequestId(0),
        OffscreenRequest::OffscreenReady,
    )
    .await?;
    let report = gg_web::webgpu::probe_webgpu().await;
    gg_chrome::send::<_, OffscreenAnswer>(
        Context::Offscreen,
        RequestId(1),
        OffscreenRequest::AdapterReport(report),
    )
    .await?;
    Ok(())
}

/// A request of the service worker: the one channel this document answers.
fn parse(message: &JsValue) -> Option<Envelope<OffscreenCommand>> {
    let json = gg_chrome::from_js(message).ok()?;
    Envelope::from_json(json)
        .ok()
        .filter(|env| env.from == Context::ServiceWorker)
}

/// Whether this document answers `message`: only the service worker's commands
/// ([`OffscreenCommand`]). Everything else sent with `chrome.runtime.sendMessage` (overlay
/// requests, our own broadcasts) is left to the service worker, which is the one context that
/// answers those.
#[wasm_bindgen]
pub fn accepts(message: JsValue) -> bool {
    parse(&message).is_some()
}

/// `chrome.runtime.onMessage` for requests [`accepts`] took.
#[wasm_bindgen]
pub async fn on_message(message: JsValue, sender: JsValue) -> Result<JsValue, JsValue> {
    let Some(env) = parse(&message) else {
        return Ok(JsValue::UNDEFINED);
    };
    let sender = gg_chrome::sender_info(&sender);
    let body = match sender.check(&gg_chrome::extension_id(), Context::ServiceWorker) {
        Err(e) => {
            log::warn(&e.to_string());
            OffscreenReply::Error {
                message: e.to_string(),
            }
        }
        Ok(()) => host::handle(env.body).await.unwrap_or_else(|e| {
            let message = e.to_string();
            log::error(&message);
            OffscreenReply::Error { message }
        }),
    };
    Ok(gg_chrome::into_js(&Envelope::new(
        env.id,
        Context::Offscreen,
        body,
    ))?)
}
