//! The embeddable widget's dedicated Worker: hosts the model (`gg-web`: WebGPU, downloads into
//! the page origin's Cache Storage, the loaded model) and the agent loop, one conversation, and
//! asks the page's main thread to run the page tools. It speaks
//! [`gg_messages::widget`]: [`WidgetRequest`](gg_messages::widget::WidgetRequest) in,
//! [`WorkerMessage`] out, each in a [`WidgetEnvelope`]. See the crate's README for how the page
//! drives it.
//!
//! [`worker`] is the protocol's logic, independent of the browser (tested natively); this file is
//! the browser side: `postMessage`, timers, the model host.

pub mod worker;

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use gg_agent::{Agent, ModelBackend};
use gg_messages::widget::{TurnSettings, WidgetEnvelope, WorkerMessage};
use gg_web::turn::TurnModel;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use web_sys::{DedicatedWorkerGlobalScope, MessageEvent};
use worker::Host as _;

/// The worker's global and the model host.
struct WebHost {
    scope: DedicatedWorkerGlobalScope,
}

/// Posts `message` in its envelope, as bytes ([`WidgetEnvelope::to_bytes`]: a `Uint8Array` whose
/// buffer is transferred).
fn post_to(scope: &DedicatedWorkerGlobalScope, message: WorkerMessage) {
    let posted = WidgetEnvelope::new(message)
        .to_bytes()
        .map_err(|e| JsValue::from_str(&e))
        .and_then(|bytes| {
            let array = js_sys::Uint8Array::from(bytes.as_slice());
            scope.post_message_with_transfer(&array, &js_sys::Array::of1(&array.buffer()))
        });
    if let Err(e) = posted {
        gg_web::log::error(&format!(
            "could not post to the page: {}",
            gg_web::cache::js_message(&e)
        ));
    }
}

impl worker::Host for WebHost {
    fn post(&self, message: WorkerMessage) {
        post_to(&self.scope, message);
    }

    fn spawn(&self, task: LocalBoxFuture<'static, ()>) {
        wasm_bindgen_futures::spawn_local(task);
    }

    fn sleep(&self, ms: u32) -> LocalBoxFuture<'static, ()> {
        gloo_timers::future::TimeoutFuture::new(ms).boxed_local()
    }

    fn site(&self) -> String {
        use web_sys::WorkerGlobalScope;
        let scope: &WorkerGlobalScope = self.scope.as_ref();
        scope.location().origin()
    }

    fn nonce(&self) -> String {
        gg_web::turn::random_nonce()
    }

    fn model<'a>(
        &'a self,
        settings: &'a TurnSettings,
        agent: &'a mut Agent,
    ) -> LocalBoxFuture<'a, Result<Rc<dyn ModelBackend>, String>> {
        async move {
            let model = TurnModel::for_source(&settings.repository, &settings.model_size)
                .await
                .map_err(|e| e.to_string())?;
            model.backend(agent, None).await.map_err(|e| e.to_string())
        }
        .boxed_local()
    }

    fn load(
        &self,
        repository: String,
        model_size: String,
    ) -> LocalBoxFuture<'static, Result<(), String>> {
        async move {
            let model = TurnModel::for_source(&repository, &model_size)
                .await
                .map_err(|e| e.to_string())?;
            // A load failure was reported as the model's status (`Failed`).
            let _ = model.load(None).await;
            Ok(())
        }
        .boxed_local()
    }
}

/// A message of this worker (the bytes it posts) as the JSON of its serde form, for tests that
/// speak the protocol from a page (`tests/e2e/widgetworker.test.mjs`): development builds only.
#[cfg(feature = "wire-json")]
#[wasm_bindgen]
pub fn wire_json(bytes: &[u8]) -> Result<String, JsValue> {
    WidgetEnvelope::<WorkerMessage>::bytes_to_json(bytes).map_err(|e| JsValue::from_str(&e))
}

/// Called by `gemma-gem-widget-worker.js` once the module has loaded, with the messages the page
/// sent meanwhile (the loader keeps them). Probes WebGPU and posts
/// [`WorkerMessage::Started`] — always the worker's first message — then handles `early` and
/// every later message in order.
#[wasm_bindgen]
pub async fn start(early: js_sys::Array) -> Result<(), JsValue> {
    let scope: DedicatedWorkerGlobalScope = js_sys::global().dyn_into().map_err(|_| {
        JsValue::from_str(
            "gg_widget_worker runs in a dedicated Worker (new Worker(url, {type: 'module'}))",
        )
    })?;
    gg_web::log::info("widget worker started");
    {
        let scope = scope.clone();
        gg_web::model::set_status_sink(move |report| {
            post_to(&scope, WorkerMessage::ModelStatus(report));
        });
    }
    let adapter = gg_web::webgpu::probe_webgpu().await;
    if let Some(error) = &adapter.error {
        gg_web::log::warn(&format!("no WebGPU in the widget's worker: {error}"));
    }
    let host = Rc::new(WebHost {
        scope: scope.clone(),
    });
    host.post(WorkerMessage::Started { adapter });
    let worker = worker::Worker::new(host);
    let receive = {
        let worker = worker.clone();
        move |data: JsValue| match serde_wasm_bindgen::from_value::<serde_json::Value>(data) {
            Ok(json) => worker.on_message(json),
            Err(e) => worker.on_message(serde_json::Value::String(e.to_string())),
        }
    };
    let receive = Rc::new(receive);
    let on_message = {
        let receive = receive.clone();
        Closure::<dyn Fn(MessageEvent)>::new(move |event: MessageEvent| receive(event.data()))
    };
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The worker lives as long as its page: the handler is never dropped.
    on_message.forget();
    for data in early.iter() {
        receive(data);
    }
    Ok(())
}
