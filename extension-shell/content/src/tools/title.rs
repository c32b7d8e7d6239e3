//! `get_page_title`: the page's title and address.

use wasm_bindgen::JsValue;
use web_sys::Document;

use crate::js::Obj;

/// The `title` of `doc` and the `url` of the page.
pub(super) fn get_page_title(doc: &Document) -> JsValue {
    let href = web_sys::window()
        .and_then(|w| w.location().href().ok())
        .unwrap_or_default();
    Obj::new().s("title", &doc.title()).s("url", &href).js()
}
