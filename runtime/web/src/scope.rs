//! The browser global the model is hosted in: the offscreen document's `Window` or a dedicated
//! Worker's `WorkerGlobalScope`. Both have `fetch`, `caches`, `navigator.storage` and
//! `navigator.gpu`; this module reaches them through whichever global runs the code.

use js_sys::Promise;
use wasm_bindgen::JsCast;
use web_sys::{CacheStorage, Request, StorageManager};

/// The global scope of the running code.
pub enum Scope {
    Window(web_sys::Window),
    Worker(web_sys::WorkerGlobalScope),
}

impl Scope {
    /// The current global (`None` in a global that is neither, e.g. a worklet).
    pub fn current() -> Option<Self> {
        let global = js_sys::global();
        if let Some(w) = global.dyn_ref::<web_sys::Window>() {
            return Some(Self::Window(w.clone()));
        }
        global
            .dyn_into::<web_sys::WorkerGlobalScope>()
            .ok()
            .map(Self::Worker)
    }

    pub fn fetch_with_str(&self, url: &str) -> Promise {
        match self {
            Self::Window(w) => w.fetch_with_str(url),
            Self::Worker(w) => w.fetch_with_str(url),
        }
    }

    pub fn fetch_with_request(&self, request: &Request) -> Promise {
        match self {
            Self::Window(w) => w.fetch_with_request(request),
            Self::Worker(w) => w.fetch_with_request(request),
        }
    }

    /// Cache Storage (an error where the browser refuses it, e.g. an opaque origin).
    pub fn caches(&self) -> Result<CacheStorage, wasm_bindgen::JsValue> {
        match self {
            Self::Window(w) => w.caches(),
            Self::Worker(w) => w.caches(),
        }
    }

    /// `navigator.storage`.
    pub fn storage(&self) -> StorageManager {
        match self {
            Self::Window(w) => w.navigator().storage(),
            Self::Worker(w) => w.navigator().storage(),
        }
    }
}
