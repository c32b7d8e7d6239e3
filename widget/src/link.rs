//! The model worker: a module Worker from the widget's folder, spoken to in
//! [`gg_messages::widget`]'s protocol (requests as JSON values, its messages back as bytes).

use gg_messages::widget::{PageMessage, PageRequest, WIDGET_PROTOCOL, WidgetEnvelope};
use std::rc::Rc;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use web_sys::{MessageEvent, Worker, WorkerOptions, WorkerType};

/// The running worker; clones share it.
#[derive(Clone)]
pub struct WorkerLink {
    inner: Rc<Inner>,
}

struct Inner {
    worker: Worker,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
    _on_error: Closure<dyn FnMut(web_sys::ErrorEvent)>,
}

impl WorkerLink {
    /// Starts the worker at `url`; `on_message` gets each of its messages (anything that is
    /// not this protocol's is dropped). A worker that fails to start or throws is reported as
    /// [`PageMessage::Error`].
    pub fn start(url: &str, on_message: impl Fn(PageMessage) + 'static) -> Result<Self, String> {
        let options = WorkerOptions::new();
        options.set_type(WorkerType::Module);
        options.set_name("gemma-gem-widget");
        let worker = Worker::new_with_options(url, &options).map_err(|e| describe(&e))?;
        let on_message = Rc::new(on_message);
        let handler = {
            let on_message = on_message.clone();
            Closure::<dyn FnMut(MessageEvent)>::new(move |event: MessageEvent| {
                // The worker posts bytes (`WidgetEnvelope::to_bytes`).
                let Some(bytes) = event.data().dyn_into::<js_sys::Uint8Array>().ok() else {
                    return;
                };
                let Some(message) = WidgetEnvelope::<PageMessage>::from_bytes(&bytes.to_vec())
                else {
                    return;
                };
                on_message(message);
            })
        };
        let on_error = Closure::<dyn FnMut(web_sys::ErrorEvent)>::new(
            move |e: web_sys::ErrorEvent| {
                e.prevent_default();
                let detail = if e.message().is_empty() {
                    "the script could not be loaded (check that gemma-gem-widget-worker.js is served \
                 next to gemma-gem-widget.js and that the page's CSP allows worker-src 'self')"
                    .to_owned()
                } else {
                    e.message()
                };
                on_message(PageMessage::Error {
                    message: format!("the model worker failed: {detail}"),
                });
            },
        );
        worker.set_onmessage(Some(handler.as_ref().unchecked_ref()));
        worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        Ok(Self {
            inner: Rc::new(Inner {
                worker,
                _on_message: handler,
                _on_error: on_error,
            }),
        })
    }

    /// Posts `request` (as a JSON value).
    pub fn post(&self, request: &PageRequest) {
        if let Ok(value) = js_sys::JSON::parse(&request.to_json()) {
            let _ = self.inner.worker.post_message(&value);
        }
    }

    /// Posts the page tools' answer to request `id` as it is: `{"type": kind, "id": id,
    /// "result": result}` (`tool_result` or `element_facts`, `result` in serde form).
    pub fn post_answer(&self, kind: &str, id: u64, result: &JsValue) {
        let body = js_sys::Object::new();
        let envelope = js_sys::Object::new();
        let set = |o: &js_sys::Object, k: &str, v: &JsValue| {
            js_sys::Reflect::set(o, &JsValue::from_str(k), v).is_ok()
        };
        // Ids are the worker's counter, far below 2^53.
        let complete = set(&body, "type", &JsValue::from_str(kind))
            && set(&body, "id", &JsValue::from_f64(id as f64))
            && set(&body, "result", result)
            && set(&envelope, "protocol", &JsValue::from_str(WIDGET_PROTOCOL))
            && set(&envelope, "body", &body);
        if complete {
            let _ = self.inner.worker.post_message(&envelope);
        }
    }

    pub fn terminate(&self) {
        self.inner.worker.terminate();
    }
}

fn describe(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| format!("{e:?}"))
}
