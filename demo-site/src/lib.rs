//! The demo site: the component playground (every component in every state) and, later, the
//! embeddable widget on a page we control.

pub mod mock_agent;
pub mod playground;

use wasm_bindgen::prelude::*;

/// Page CSS that tries everything to restyle, hide or distort the UI (`playground.html?hostile=1`).
/// With it the components must look exactly as without it.
pub const HOSTILE_CSS: &str = "\
* { color: red !important; font-family: cursive !important; font-size: 22px !important; \
    line-height: 3 !important; letter-spacing: 3px !important; box-sizing: content-box !important; } \
button, input, textarea, select, svg { display: none !important; } \
div, section, article, li { background: yellow !important; border: 4px dashed green !important; \
    padding: 12px !important; } \
gemma-gem { display: none !important; opacity: 0.2 !important; filter: invert(1) !important; \
    transform: rotate(8deg) scale(0.5) !important; clip-path: inset(40%) !important; } \
:root { --gg-bg: red; --gg-fg: lime; --gg-accent: orange; }";

/// A query parameter's value, if made of `[a-z0-9-]` only.
fn query_param(search: &str, name: &str) -> Option<String> {
    search
        .trim_start_matches('?')
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
        .filter(|v| {
            !v.is_empty()
                && v.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
        .map(str::to_owned)
}

/// The `only` parameter (`?only=tools`): show one specimen.
fn only_param(search: &str) -> Option<yew::AttrValue> {
    query_param(search, "only").map(yew::AttrValue::from)
}

#[cfg(test)]
mod tests {
    use super::{only_param, query_param};

    #[test]
    fn only_parameter() {
        assert_eq!(only_param("?only=tools").as_deref(), Some("tools"));
        assert_eq!(only_param("?a=1&only=errors").as_deref(), Some("errors"));
        assert_eq!(only_param("?only=").as_deref(), None);
        assert_eq!(only_param("?only=<x>").as_deref(), None);
        assert_eq!(only_param("").as_deref(), None);
        assert_eq!(
            query_param("?only=x&hostile=1", "hostile").as_deref(),
            Some("1")
        );
    }
}

/// Mounts the playground into the element with id `gg-playground`.
#[wasm_bindgen]
pub fn start_playground() -> Result<(), JsValue> {
    let document = web_sys::window()
        .and_then(|w| w.document())
        .ok_or("no document")?;
    let root = document
        .get_element_by_id("gg-playground")
        .ok_or("missing #gg-playground")?;
    let search = web_sys::window()
        .and_then(|w| w.location().search().ok())
        .unwrap_or_default();
    if query_param(&search, "hostile").as_deref() == Some("1") {
        let style = document.create_element("style")?;
        style.set_text_content(Some(HOSTILE_CSS));
        document.head().ok_or("no <head>")?.append_child(&style)?;
    }
    let only = only_param(&search);
    yew::Renderer::<playground::Playground>::with_root_and_props(
        root,
        playground::PlaygroundProps { only },
    )
    .render();
    Ok(())
}
