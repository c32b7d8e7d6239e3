//! Selector queries (`querySelector`, `querySelectorAll`, `matches`) that a page cannot
//! replace.
//!
//! The content script runs in the extension's isolated world: the page's scripts cannot touch
//! the prototypes it calls, and these are the plain DOM methods. The `embedded` build runs in
//! the page's own realm, where a page (or a script it loads) may have replaced
//! `Element.prototype.querySelector` and the like: there the methods are taken once from a
//! fresh realm (an `about:blank` iframe, inserted and removed at once), whose functions work on
//! the page's nodes and whose `Function.prototype.call` the page never saw. Where that realm
//! cannot be made, the page's own methods are used.

use wasm_bindgen::{JsCast, JsValue};
use web_sys::{Element, NodeList};

#[cfg(feature = "embedded")]
mod fresh {
    use std::cell::OnceCell;

    use js_sys::Function;
    use wasm_bindgen::{JsCast, JsValue};

    use crate::js;

    /// The methods, taken from a fresh realm.
    pub struct Methods {
        pub query: [Function; 3],
        pub query_all: [Function; 3],
        pub matches: Function,
    }

    thread_local! {
        static METHODS: OnceCell<Option<Methods>> = const { OnceCell::new() };
    }

    /// Which prototype a node's methods are on: `Document`, `Element`, `DocumentFragment`
    /// (shadow roots), told apart by `nodeType`.
    pub fn kind(node: &JsValue) -> usize {
        match js::get_f64(node, "nodeType") {
            Some(9.0) => 0,
            Some(11.0) => 2,
            _ => 1,
        }
    }

    fn take() -> Option<Methods> {
        let doc = web_sys::window()?.document()?;
        let root = doc.document_element()?;
        let frame = doc.create_element("iframe").ok()?;
        // `hidden`, not a style attribute: a page whose CSP has no `style-src 'unsafe-inline'`
        // (the widget on a strict site) blocks and reports style attributes.
        let _ = frame.set_attribute("hidden", "");
        root.append_child(&frame).ok()?;
        let win = js::get(&frame, "contentWindow");
        let method = |ctor: &str, name: &str| -> Option<Function> {
            js::get(&js::get(&js::get(&win, ctor), "prototype"), name)
                .dyn_into::<Function>()
                .ok()
        };
        let methods = (|| {
            Some(Methods {
                query: [
                    method("Document", "querySelector")?,
                    method("Element", "querySelector")?,
                    method("DocumentFragment", "querySelector")?,
                ],
                query_all: [
                    method("Document", "querySelectorAll")?,
                    method("Element", "querySelectorAll")?,
                    method("DocumentFragment", "querySelectorAll")?,
                ],
                matches: method("Element", "matches")?,
            })
        })();
        let _ = js::call(&frame, "remove", &[]);
        methods
    }

    /// Runs `f` with the methods, taking them on first use; `None` when no fresh realm could
    /// be made.
    pub fn with<R>(f: impl FnOnce(&Methods) -> R) -> Option<R> {
        METHODS.with(|cell| cell.get_or_init(take).as_ref().map(f))
    }

    /// Takes the methods now (when the tools are created, before a page script may break
    /// what making the realm needs).
    pub fn prepare() {
        with(|_| ());
    }

    /// `Ok(value)` or the thrown error.
    pub fn call(f: &Function, this: &JsValue, selector: &str) -> Result<JsValue, JsValue> {
        f.call1(this, &JsValue::from_str(selector))
    }
}

#[cfg(feature = "embedded")]
pub use fresh::prepare;

/// `node.querySelector(selector)` on a document, element or shadow root.
pub fn query(node: &JsValue, selector: &str) -> Result<Option<Element>, JsValue> {
    #[cfg(feature = "embedded")]
    if let Some(found) = fresh::with(|m| fresh::call(&m.query[fresh::kind(node)], node, selector)) {
        let found = found?;
        return Ok((!found.is_null() && !found.is_undefined()).then(|| found.unchecked_into()));
    }
    node.unchecked_ref::<web_sys::Document>()
        .query_selector(selector)
}

/// `node.querySelectorAll(selector)` on a document, element or shadow root.
pub fn query_all(node: &JsValue, selector: &str) -> Result<NodeList, JsValue> {
    #[cfg(feature = "embedded")]
    if let Some(found) =
        fresh::with(|m| fresh::call(&m.query_all[fresh::kind(node)], node, selector))
    {
        return found.map(JsCast::unchecked_into);
    }
    node.unchecked_ref::<web_sys::Document>()
        .query_selector_all(selector)
}

/// `el.matches(selector)`.
pub fn matches(el: &Element, selector: &str) -> Result<bool, JsValue> {
    #[cfg(feature = "embedded")]
    if let Some(found) = fresh::with(|m| fresh::call(&m.matches, el, selector)) {
        return found.map(|v| v.as_bool() == Some(true));
    }
    el.matches(selector)
}
