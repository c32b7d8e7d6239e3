//! The demo site: the embeddable widget on a page we control, and the component playground.

use gg_components::{Launcher, LauncherStatus};
use wasm_bindgen::prelude::*;
use yew::prelude::*;

#[function_component(Playground)]
fn playground() -> Html {
    html! {
        <section aria-label="Launcher states">
            <h2>{"Launcher"}</h2>
            { for [LauncherStatus::Idle, LauncherStatus::Loading, LauncherStatus::Thinking, LauncherStatus::Acting, LauncherStatus::Error]
                .into_iter().map(|s| html! { <figure><Launcher status={s} /><figcaption>{s.as_str()}</figcaption></figure> }) }
        </section>
    }
}

/// Mounts the playground into the element with id `gg-playground`.
#[wasm_bindgen]
pub fn start_playground() -> Result<(), JsValue> {
    let document = web_sys::window().and_then(|w| w.document()).ok_or("no document")?;
    let root = document.get_element_by_id("gg-playground").ok_or("missing #gg-playground")?;
    yew::Renderer::<Playground>::with_root(root).render();
    Ok(())
}
