//! Thin bindings to the `chrome.*` APIs used by the extension's wasm contexts, and the
//! `[Gemma Gem]` logger. Each binding is a direct `wasm_bindgen` import; promises become futures.

use gg_messages::{Context, Envelope, LOG_PREFIX, RequestId, SenderInfo};
use serde::{Serialize, de::DeserializeOwned};
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    /// `chrome.runtime.id`
    #[wasm_bindgen(js_namespace = ["chrome", "runtime"], js_name = id, thread_local_v2)]
    static RUNTIME_ID: String;

    #[wasm_bindgen(js_namespace = ["chrome", "runtime"], js_name = sendMessage, catch)]
    async fn runtime_send_message(message: JsValue) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(js_namespace = ["chrome", "runtime"], js_name = getURL)]
    pub fn runtime_get_url(path: &str) -> String;

    #[wasm_bindgen(js_namespace = ["chrome", "runtime"], js_name = getContexts, catch)]
    async fn runtime_get_contexts(filter: JsValue) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(js_namespace = ["chrome", "offscreen"], js_name = createDocument, catch)]
    async fn offscreen_create_document(params: JsValue) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(js_namespace = ["chrome", "storage", "session"], js_name = set, catch)]
    async fn storage_session_set(items: JsValue) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(js_namespace = ["chrome", "storage", "session"], js_name = get, catch)]
    async fn storage_session_get(keys: JsValue) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(js_namespace = ["chrome", "tabs"], js_name = sendMessage, catch)]
    async fn tabs_send_message(tab_id: i32, message: JsValue) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(js_namespace = ["chrome", "tabs"], js_name = sendMessage, catch)]
    async fn tabs_send_message_with(
        tab_id: i32,
        message: JsValue,
        options: JsValue,
    ) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(js_namespace = ["chrome", "tabs"], js_name = get, catch)]
    async fn tabs_get(tab_id: i32) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(js_namespace = ["chrome", "webNavigation"], js_name = getFrame, catch)]
    async fn web_navigation_get_frame(details: JsValue) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(js_namespace = ["chrome", "storage", "session"], js_name = remove, catch)]
    async fn storage_session_remove(keys: JsValue) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(js_namespace = ["chrome", "storage", "sync"], js_name = get, catch)]
    async fn storage_sync_get(keys: JsValue) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(js_namespace = ["chrome", "storage", "sync"], js_name = set, catch)]
    async fn storage_sync_set(items: JsValue) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(js_namespace = ["chrome", "storage", "local"], js_name = get, catch)]
    async fn storage_local_get(keys: JsValue) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(js_namespace = ["chrome", "storage", "local"], js_name = set, catch)]
    async fn storage_local_set(items: JsValue) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(js_namespace = ["chrome", "storage", "local"], js_name = remove, catch)]
    async fn storage_local_remove(keys: JsValue) -> Result<JsValue, JsValue>;
}

/// This extension's id.
pub fn extension_id() -> String {
    RUNTIME_ID.with(Clone::clone)
}

/// Errors from the chrome bindings, with the API that failed.
#[derive(Debug, Clone)]
pub struct ChromeError {
    pub api: &'static str,
    pub message: String,
}

impl std::fmt::Display for ChromeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.api, self.message)
    }
}

impl std::error::Error for ChromeError {}

impl From<ChromeError> for JsValue {
    fn from(e: ChromeError) -> Self {
        js_sys::Error::new(&e.to_string()).into()
    }
}

fn js_error_message(v: &JsValue) -> String {
    v.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| v.as_string())
        .unwrap_or_else(|| format!("{v:?}"))
}

fn err(api: &'static str) -> impl Fn(JsValue) -> ChromeError {
    move |v| ChromeError {
        api,
        message: js_error_message(&v),
    }
}

fn to_js<T: serde::Serialize>(api: &'static str, value: &T) -> Result<JsValue, ChromeError> {
    value
        .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(|e| ChromeError {
            api,
            message: e.to_string(),
        })
}

/// Converts a JS value received from another context into JSON for typed parsing.
pub fn from_js(value: &JsValue) -> Result<serde_json::Value, String> {
    serde_wasm_bindgen::from_value(value.clone()).map_err(|e| e.to_string())
}

/// Converts a typed value into a JS value for answering a message.
pub fn into_js<T: serde::Serialize>(value: &T) -> Result<JsValue, ChromeError> {
    to_js("serialize", value)
}

/// Sends an envelope to the extension's other contexts and parses the answer as `A` (the answer
/// enum of the channel of `R`).
pub async fn send<R: Serialize, A: DeserializeOwned>(
    from: Context,
    id: RequestId,
    body: R,
) -> Result<Option<Envelope<A>>, ChromeError> {
    let msg = to_js("chrome.runtime.sendMessage", &Envelope::new(id, from, body))?;
    let answer = runtime_send_message(msg)
        .await
        .map_err(err("chrome.runtime.sendMessage"))?;
    if answer.is_undefined() || answer.is_null() {
        return Ok(None);
    }
    let json = from_js(&answer).map_err(|message| ChromeError {
        api: "chrome.runtime.sendMessage",
        message,
    })?;
    Envelope::from_json(json)
        .map(Some)
        .map_err(|e| ChromeError {
            api: "chrome.runtime.sendMessage",
            message: e.to_string(),
        })
}

/// Sends an envelope to the content scripts of one tab and parses the typed answer.
pub async fn send_to_tab<R: Serialize, A: DeserializeOwned>(
    tab_id: i64,
    env: &Envelope<R>,
) -> Result<Envelope<A>, ChromeError> {
    send_envelope(tab_id, None, env).await
}

/// Sends an envelope to one document of a tab (`tabs.sendMessage` with `documentId`): Chrome
/// delivers it to that document only, and fails when the tab no longer shows it.
pub async fn send_to_document<R: Serialize, A: DeserializeOwned>(
    tab_id: i64,
    document_id: &str,
    env: &Envelope<R>,
) -> Result<Envelope<A>, ChromeError> {
    if document_id.is_empty() {
        return Err(ChromeError {
            api: "chrome.tabs.sendMessage",
            message: "no document to send to".into(),
        });
    }
    send_envelope(tab_id, Some(document_id), env).await
}

/// `tabs.sendMessage` to a tab (or only to one of its documents) and the typed answer.
async fn send_envelope<R: Serialize, A: DeserializeOwned>(
    tab_id: i64,
    document_id: Option<&str>,
    env: &Envelope<R>,
) -> Result<Envelope<A>, ChromeError> {
    const API: &str = "chrome.tabs.sendMessage";
    let tab = i32::try_from(tab_id).map_err(|_| ChromeError {
        api: API,
        message: format!("bad tab id {tab_id}"),
    })?;
    let message = to_js(API, env)?;
    let answer = match document_id {
        Some(id) => {
            let options = to_js(API, &serde_json::json!({ "documentId": id }))?;
            tabs_send_message_with(tab, message, options).await
        }
        None => tabs_send_message(tab, message).await,
    }
    .map_err(err(API))?;
    let json = from_js(&answer).map_err(|message| ChromeError { api: API, message })?;
    Envelope::from_json(json).map_err(|e| ChromeError {
        api: API,
        message: e.to_string(),
    })
}

/// A tab's top-level document as `webNavigation.getFrame` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopFrame {
    /// Chrome's id of the document (changes with every navigation that commits a new one).
    pub document_id: String,
    pub url: String,
}

/// The document the top frame of `tab_id` shows now.
pub async fn top_frame(tab_id: i64) -> Result<TopFrame, ChromeError> {
    const API: &str = "chrome.webNavigation.getFrame";
    let details = to_js(API, &serde_json::json!({ "tabId": tab_id, "frameId": 0 }))?;
    let frame = web_navigation_get_frame(details).await.map_err(err(API))?;
    let json = from_js(&frame).map_err(|message| ChromeError { api: API, message })?;
    let field = |key: &str| {
        json.get(key)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let document_id = field("documentId");
    if document_id.is_empty() {
        return Err(ChromeError {
            api: API,
            message: format!("tab {tab_id} has no top-level document"),
        });
    }
    Ok(TopFrame {
        document_id,
        url: field("url"),
    })
}

/// The URL a tab shows (empty when the extension may not see it).
pub async fn tab_url(tab_id: i64) -> Result<String, ChromeError> {
    const API: &str = "chrome.tabs.get";
    let tab = i32::try_from(tab_id).map_err(|_| ChromeError {
        api: API,
        message: format!("bad tab id {tab_id}"),
    })?;
    let info = tabs_get(tab).await.map_err(err(API))?;
    let json = from_js(&info).map_err(|message| ChromeError { api: API, message })?;
    Ok(json
        .get("url")
        .and_then(|u| u.as_str())
        .unwrap_or_default()
        .to_owned())
}

/// Every key of `chrome.storage.session`.
pub async fn session_keys() -> Result<Vec<String>, ChromeError> {
    let got = storage_session_get(JsValue::NULL)
        .await
        .map_err(err("chrome.storage.session.get"))?;
    Ok(js_sys::Object::keys(got.unchecked_ref::<js_sys::Object>())
        .iter()
        .filter_map(|k| k.as_string())
        .collect())
}

/// Removes one key from `chrome.storage.session`.
pub async fn session_remove(key: &str) -> Result<(), ChromeError> {
    storage_session_remove(JsValue::from_str(key))
        .await
        .map_err(err("chrome.storage.session.remove"))?;
    Ok(())
}

/// Reads one JSON value from `chrome.storage.sync` (`None` when absent).
pub async fn sync_get(key: &str) -> Result<Option<serde_json::Value>, ChromeError> {
    let got = storage_sync_get(JsValue::from_str(key))
        .await
        .map_err(err("chrome.storage.sync.get"))?;
    let json = from_js(&got).map_err(|message| ChromeError {
        api: "chrome.storage.sync.get",
        message,
    })?;
    Ok(json.get(key).cloned().filter(|v| !v.is_null()))
}

/// Stores one JSON value in `chrome.storage.sync` (every context sees the change through
/// `chrome.storage.onChanged`).
pub async fn sync_set(key: &str, value: &serde_json::Value) -> Result<(), ChromeError> {
    let items = to_js(
        "chrome.storage.sync.set",
        &serde_json::json!({ key: value }),
    )?;
    storage_sync_set(items)
        .await
        .map_err(err("chrome.storage.sync.set"))?;
    Ok(())
}

/// Every item of `chrome.storage.local`.
pub async fn local_items() -> Result<serde_json::Map<String, serde_json::Value>, ChromeError> {
    const API: &str = "chrome.storage.local.get";
    let got = storage_local_get(JsValue::NULL).await.map_err(err(API))?;
    match from_js(&got).map_err(|message| ChromeError { api: API, message })? {
        serde_json::Value::Object(items) => Ok(items),
        _ => Ok(serde_json::Map::new()),
    }
}

/// Reads one JSON value from `chrome.storage.local` (`None` when absent).
pub async fn local_get(key: &str) -> Result<Option<serde_json::Value>, ChromeError> {
    const API: &str = "chrome.storage.local.get";
    let got = storage_local_get(JsValue::from_str(key))
        .await
        .map_err(err(API))?;
    let json = from_js(&got).map_err(|message| ChromeError { api: API, message })?;
    Ok(json.get(key).cloned().filter(|v| !v.is_null()))
}

/// Stores several items in `chrome.storage.local` at once.
pub async fn local_set(
    items: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), ChromeError> {
    let items = to_js("chrome.storage.local.set", items)?;
    storage_local_set(items)
        .await
        .map_err(err("chrome.storage.local.set"))?;
    Ok(())
}

/// Removes one key from `chrome.storage.local`.
pub async fn local_remove(key: &str) -> Result<(), ChromeError> {
    storage_local_remove(JsValue::from_str(key))
        .await
        .map_err(err("chrome.storage.local.remove"))?;
    Ok(())
}

/// Parses the `sender` argument of a `chrome.runtime.onMessage` listener.
pub fn sender_info(sender: &JsValue) -> SenderInfo {
    from_js(sender)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

/// Whether an offscreen document of this extension exists.
pub async fn offscreen_exists() -> Result<bool, ChromeError> {
    let filter = to_js(
        "chrome.runtime.getContexts",
        &serde_json::json!({ "contextTypes": ["OFFSCREEN_DOCUMENT"] }),
    )?;
    let contexts = runtime_get_contexts(filter)
        .await
        .map_err(err("chrome.runtime.getContexts"))?;
    Ok(js_sys::Array::from(&contexts).length() > 0)
}

/// Creates the offscreen document at `path` (relative to the extension root).
pub async fn create_offscreen(path: &str, justification: &str) -> Result<(), ChromeError> {
    let params = to_js(
        "chrome.offscreen.createDocument",
        &serde_json::json!({ "url": path, "reasons": ["WORKERS"], "justification": justification }),
    )?;
    offscreen_create_document(params)
        .await
        .map_err(err("chrome.offscreen.createDocument"))?;
    Ok(())
}

/// Stores one JSON value in `chrome.storage.session`.
pub async fn session_set(key: &str, value: &serde_json::Value) -> Result<(), ChromeError> {
    let items = to_js(
        "chrome.storage.session.set",
        &serde_json::json!({ key: value }),
    )?;
    storage_session_set(items)
        .await
        .map_err(err("chrome.storage.session.set"))?;
    Ok(())
}

/// Reads one JSON value from `chrome.storage.session` (`None` when absent).
pub async fn session_get(key: &str) -> Result<Option<serde_json::Value>, ChromeError> {
    let got = storage_session_get(JsValue::from_str(key))
        .await
        .map_err(err("chrome.storage.session.get"))?;
    let json = from_js(&got).map_err(|message| ChromeError {
        api: "chrome.storage.session.get",
        message,
    })?;
    Ok(json.get(key).cloned().filter(|v| !v.is_null()))
}

/// Logging with the `[Gemma Gem]` prefix. Debug and info lines are compiled in only with the
/// `dev-log` feature (development builds); errors and warnings are always logged.
pub mod log {
    use super::LOG_PREFIX;

    pub fn error(msg: &str) {
        web_sys::console::error_1(&format!("{LOG_PREFIX} {msg}").into());
    }

    pub fn warn(msg: &str) {
        web_sys::console::warn_1(&format!("{LOG_PREFIX} {msg}").into());
    }

    pub fn info(msg: &str) {
        if cfg!(feature = "dev-log") {
            web_sys::console::info_1(&format!("{LOG_PREFIX} {msg}").into());
        }
    }

    pub fn debug(msg: &str) {
        if cfg!(feature = "dev-log") {
            web_sys::console::debug_1(&format!("{LOG_PREFIX} {msg}").into());
        }
    }
}
