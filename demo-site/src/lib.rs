//! The demo site: the component playground (every component in every state) and, later, the
//! embeddable widget on a page we control.

pub mod mock_agent;
pub mod playground;

use wasm_bindgen::prelude::*;

/// Mounts the playground into the element with id `gg-playground`.
#[wasm_bindgen]
pub fn start_playground() -> Result<(), JsValue> {
    let document = web_sys::window()
        .and_then(|w| w.document())
        .ok_or("no document")?;
    let root = document
        .get_element_by_id("gg-playground")
        .ok_or("missing #gg-playground")?;
    yew::Renderer::<playground::Playground>::with_root(root).render();
    Ok(())
}
