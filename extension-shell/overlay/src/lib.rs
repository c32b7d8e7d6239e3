//! The overlay page: the chat UI, shown in an iframe inside the page's closed shadow root.

use gg_chrome::log;
use wasm_bindgen::prelude::*;
use yew::prelude::*;

#[function_component(OverlayApp)]
fn overlay_app() -> Html {
    html! {
        <main data-testid="gg-panel" aria-label="Gemma Gem">
            <h1>{"Gemma Gem"}</h1>
            <p>{"The on-device assistant for this page."}</p>
        </main>
    }
}

/// Called by `overlay.js` once the module has loaded.
#[wasm_bindgen]
pub fn start() {
    log::info("overlay started");
    yew::Renderer::<OverlayApp>::new().render();
}
