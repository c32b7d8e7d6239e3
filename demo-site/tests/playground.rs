//! The playground in a real browser: every specimen mounts in its own closed shadow root, and the
//! live widget's scripted agent goes through a whole turn (download, tools, approval, answer).
#![cfg(target_arch = "wasm32")]

use gg_demo_site::mock_agent::{MockAgent, MockAgentProps};
use gg_demo_site::playground::{Playground, PlaygroundProps};
use gloo_timers::future::TimeoutFuture;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;
use web_sys::{Element, HtmlElement, HtmlTextAreaElement};

wasm_bindgen_test_configure!(run_in_browser);

fn document() -> web_sys::Document {
    web_sys::window()
        .and_then(|w| w.document())
        .expect("document")
}

fn container() -> Element {
    let root = document().create_element("div").expect("div");
    document()
        .body()
        .expect("body")
        .append_child(&root)
        .expect("append");
    root
}

fn query(root: &Element, selector: &str) -> Option<HtmlElement> {
    root.query_selector(selector)
        .ok()
        .flatten()
        .and_then(|e| e.dyn_into().ok())
}

/// Polls until `selector` matches (the mock agent runs on timers).
async fn wait_for(root: &Element, selector: &str, timeout_ms: u32) -> HtmlElement {
    let mut waited = 0;
    loop {
        if let Some(found) = query(root, selector) {
            return found;
        }
        assert!(waited < timeout_ms, "timed out waiting for {selector}");
        TimeoutFuture::new(50).await;
        waited += 50;
    }
}

#[wasm_bindgen_test]
async fn every_specimen_mounts_in_light_and_dark_closed_shadow_roots() {
    let root = container();
    let app = yew::Renderer::<Playground>::with_root_and_props(
        root.clone(),
        PlaygroundProps { only: None },
    )
    .render();
    TimeoutFuture::new(100).await;
    let specimens = root
        .query_selector_all("[data-specimen]")
        .expect("specimens")
        .length();
    assert!(specimens >= 14, "{specimens} specimens");
    let cells = root
        .query_selector_all(".pg-cell gemma-gem")
        .expect("hosts")
        .length();
    assert_eq!(
        cells,
        specimens * 2,
        "one light and one dark host per specimen"
    );
    let host = root
        .query_selector(".pg-cell gemma-gem")
        .ok()
        .flatten()
        .expect("host");
    assert!(host.shadow_root().is_none(), "closed shadow roots");
    assert!(
        query(&root, "[data-testid=gg-panel]").is_none(),
        "the components are not reachable from the page"
    );
    app.destroy();

    let root = container();
    let app = yew::Renderer::<Playground>::with_root_and_props(
        root.clone(),
        PlaygroundProps {
            only: Some("settings".into()),
        },
    )
    .render();
    TimeoutFuture::new(50).await;
    assert_eq!(
        root.query_selector_all("[data-specimen]")
            .expect("specimens")
            .length(),
        1
    );
    app.destroy();
}

#[wasm_bindgen_test]
async fn live_widget_runs_a_whole_scripted_turn() {
    let root = container();
    let app = yew::Renderer::<MockAgent>::with_root_and_props(
        root.clone(),
        MockAgentProps { shadow: false },
    )
    .render();
    wait_for(&root, "[data-testid=gg-launcher]", 2_000)
        .await
        .click();
    let input: HtmlTextAreaElement = wait_for(&root, "[data-testid=gg-input]", 2_000)
        .await
        .dyn_into()
        .expect("textarea");
    input.set_value("How many specimens are there?");
    let init = web_sys::EventInit::new();
    init.set_bubbles(true);
    input
        .dispatch_event(&web_sys::Event::new_with_event_init_dict("input", &init).expect("event"))
        .expect("input");
    TimeoutFuture::new(20).await;
    wait_for(&root, "[data-testid=gg-send]:not([disabled])", 1_000)
        .await
        .click();

    wait_for(
        &root,
        "[data-testid=gg-model-status][data-status=downloading]",
        2_000,
    )
    .await;
    wait_for(
        &root,
        "[data-testid=gg-model-status][data-status=ready]",
        10_000,
    )
    .await;
    wait_for(&root, "[data-testid=gg-thinking]", 5_000).await;
    wait_for(
        &root,
        "[data-testid=gg-tool-step][data-tool=read_page_content][data-state=done]",
        5_000,
    )
    .await;
    // The approval buttons arm only once the card has been fully visible for a moment (as a
    // user would see it): bring it into view, wait for it to arm, then approve.
    wait_for(&root, "[data-testid=gg-approval]", 5_000)
        .await
        .scroll_into_view();
    wait_for(&root, "[data-testid=gg-approval][data-arming=armed]", 5_000).await;
    wait_for(
        &root,
        "[data-testid=gg-approve-once]:not([disabled])",
        1_000,
    )
    .await
    .click();
    wait_for(
        &root,
        "[data-testid=gg-tool-step][data-tool=run_javascript][data-state=done]",
        5_000,
    )
    .await;
    wait_for(
        &root,
        "[data-testid=gg-message][data-role=assistant][data-streaming=false]",
        15_000,
    )
    .await;
    let answer = query(&root, "[data-testid=gg-message][data-role=assistant]")
        .and_then(|m| m.text_content())
        .unwrap_or_default();
    assert!(answer.contains("14 specimens"), "{answer}");
    assert!(
        query(&root, "[data-testid=gg-send]").is_some(),
        "Send is back after the turn"
    );
    app.destroy();
}
