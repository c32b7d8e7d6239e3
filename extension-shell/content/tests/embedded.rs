//! The page tools as the embeddable widget uses them (feature `embedded`), in headless Chromium
//! through `wasm-bindgen-test-runner`: a scope keeps every tool inside its subtree, the
//! allow-list refuses other tools, the widget's own element is never a target, odd input is an
//! error (never a panic), and a page that replaced `Element.prototype.querySelector` and
//! `Array.prototype.push` does not break the tools.
//!
//! `cargo test --target wasm32-unknown-unknown -p gg-content --features embedded --test embedded`
//! (with `CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER` set to wasm-bindgen-test-runner).
#![cfg(all(target_arch = "wasm32", feature = "embedded"))]

use gg_content::embedded::PageTools;
use gg_vocab::{ACT_TOOLS, READ_TOOLS, Tool};
use js_sys::{JSON, Reflect};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;
use web_sys::Element;

wasm_bindgen_test_configure!(run_in_browser);

fn document() -> web_sys::Document {
    web_sys::window()
        .and_then(|w| w.document())
        .expect("document")
}

/// Replaces the test's part of the page (a `<div id="page">` in the body, beside the test
/// runner's output) with `html`.
fn page(html: &str) {
    let doc = document();
    let root = match doc.get_element_by_id("page") {
        Some(root) => root,
        None => {
            let root = doc.create_element("div").expect("div");
            root.set_id("page");
            doc.body()
                .expect("body")
                .append_child(&root)
                .expect("append");
            root
        }
    };
    root.set_inner_html(html);
}

async fn sleep(ms: i32) {
    let wait = js_sys::Promise::new(&mut |done, _| {
        web_sys::window()
            .expect("window")
            .set_timeout_with_callback_and_timeout_and_arguments_0(&done, ms)
            .expect("timer");
    });
    JsFuture::from(wait).await.expect("a timer never rejects");
}

fn by_id(id: &str) -> Element {
    document()
        .get_element_by_id(id)
        .unwrap_or_else(|| panic!("no #{id}"))
}

fn json(text: &str) -> JsValue {
    JSON::parse(text).unwrap_or_else(|_| panic!("bad JSON in the test: {text}"))
}

fn get(v: &JsValue, key: &str) -> JsValue {
    Reflect::get(v, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

fn text(v: &JsValue, key: &str) -> String {
    get(v, key).as_string().unwrap_or_default()
}

/// Runs a call; its output's `value` (panics with the error when it failed).
async fn ok(tools: &PageTools, call: &str) -> JsValue {
    let outcome = JsFuture::from(tools.run(&json(call)))
        .await
        .expect("never rejects");
    let value = get(&get(&outcome, "Ok"), "value");
    assert!(
        !value.is_undefined(),
        "{call} failed: {}",
        JSON::stringify(&outcome)
            .map(String::from)
            .unwrap_or_default()
    );
    value
}

/// Runs a call that must fail; its `(kind, message)`.
async fn err(tools: &PageTools, call: &JsValue) -> (String, String) {
    let outcome = JsFuture::from(tools.run(call))
        .await
        .expect("never rejects");
    let e = get(&outcome, "Err");
    assert!(
        e.is_object(),
        "expected an error: {}",
        JSON::stringify(&outcome)
            .map(String::from)
            .unwrap_or_default()
    );
    (text(&e, "kind"), text(&e, "message"))
}

const SCOPED_PAGE: &str = r#"
  <nav><a href="/out-link" id="out-link">Outside link</a><button id="out">Outside button</button></nav>
  <main id="scope">
    <h1>Inside heading</h1>
    <button id="in">Inside button</button>
    <input id="field" aria-label="Inside field">
    <p>Inside text</p>
  </main>
  <footer><p>Outside text</p><input id="out-field" aria-label="Outside field"></footer>
  <gemma-gem-widget><button id="widget-button">Widget button</button></gemma-gem-widget>
"#;

#[wasm_bindgen_test]
async fn a_scoped_snapshot_and_read_leave_the_rest_of_the_page_out() {
    page(SCOPED_PAGE);
    let tools = PageTools::new(Some(by_id("scope")), &ACT_TOOLS);
    let snap = ok(&tools, r#"{"name": "snapshot_page", "args": {}}"#).await;
    let outline = text(&snap, "outline");
    assert!(outline.contains("Inside heading"), "{outline}");
    assert!(outline.contains("Inside button"), "{outline}");
    assert!(outline.contains("Inside field"), "{outline}");
    // The scope's own element is listed (a landmark here).
    assert!(outline.contains("- main"), "{outline}");
    for outside in ["Outside", "Widget button", "navigation"] {
        assert!(!outline.contains(outside), "{outside} in {outline}");
    }
    assert!(!text(&snap, "url").is_empty());

    let read = ok(&tools, r#"{"name": "read_page_content", "args": {}}"#).await;
    let content = text(&read, "content");
    assert!(content.contains("Inside text"), "{content}");
    assert!(!content.contains("Outside"), "{content}");
    // mode: main inside a scope that is itself <main>.
    let main = ok(
        &tools,
        r#"{"name": "read_page_content", "args": {"mode": "main"}}"#,
    )
    .await;
    assert!(text(&main, "content").contains("Inside text"));
    // A selector outside the scope is not read.
    let (kind, message) = err(
        &tools,
        &json(r#"{"name": "read_page_content", "args": {"selector": "footer"}}"#),
    )
    .await;
    assert_eq!(kind, "not_found");
    assert!(message.contains("outside the widget's scope"), "{message}");

    // Without a scope the whole page is seen, still without the widget's element.
    let whole = PageTools::new(None, &READ_TOOLS);
    let outline = text(
        &ok(&whole, r#"{"name": "snapshot_page", "args": {}}"#).await,
        "outline",
    );
    assert!(outline.contains("Outside button"), "{outline}");
    assert!(!outline.contains("Widget button"), "{outline}");
}

#[wasm_bindgen_test]
async fn clicks_and_typing_outside_the_scope_are_refused() {
    page(SCOPED_PAGE);
    let clicks = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let counter = {
        let clicks = clicks.clone();
        Closure::<dyn FnMut()>::new(move || clicks.set(clicks.get() + 1))
    };
    for id in ["out", "in", "widget-button"] {
        by_id(id)
            .add_event_listener_with_callback("click", counter.as_ref().unchecked_ref())
            .expect("listener");
    }
    let tools = PageTools::new(Some(by_id("scope")), &ACT_TOOLS);

    // By selector: the only match is outside.
    let (kind, message) = err(
        &tools,
        &json(r##"{"name": "click_element", "args": {"selector": "#out"}}"##),
    )
    .await;
    assert_eq!(kind, "not_found");
    assert!(message.contains("outside the widget's scope"), "{message}");
    let (kind, _) = err(
        &tools,
        &json(r##"{"name": "type_text", "args": {"selector": "#out-field", "text": "x"}}"##),
    )
    .await;
    assert_eq!(kind, "not_found");
    assert_eq!(by_id("out-field").get_attribute("value"), None);
    // The widget's own element and what is in it, scope or not.
    let (kind, message) = err(
        &tools,
        &json(r##"{"name": "click_element", "args": {"selector": "#widget-button"}}"##),
    )
    .await;
    assert_eq!(kind, "not_found");
    assert!(message.contains("widget itself"), "{message}");
    let unscoped = PageTools::new(None, &ACT_TOOLS);
    let (_, message) = err(
        &unscoped,
        &json(r##"{"name": "click_element", "args": {"selector": "#widget-button"}}"##),
    )
    .await;
    assert!(message.contains("widget itself"), "{message}");
    // A selector matching inside and outside acts on the one inside.
    ok(
        &tools,
        r#"{"name": "click_element", "args": {"selector": "button"}}"#,
    )
    .await;
    assert_eq!(clicks.get(), 1);

    // By ref: a ref of an element that the page moved out of the scope after the snapshot.
    let snap = ok(&tools, r#"{"name": "snapshot_page", "args": {}}"#).await;
    let outline = text(&snap, "outline");
    let line = outline
        .lines()
        .find(|l| l.contains("Inside button"))
        .unwrap_or_else(|| panic!("{outline}"));
    let reference = line
        .split("[ref=")
        .nth(1)
        .and_then(|r| r.split(']').next())
        .expect("a ref");
    let call = format!(r#"{{"name": "click_element", "args": {{"ref": "{reference}"}}}}"#);
    ok(&tools, &call).await;
    assert_eq!(clicks.get(), 2);
    let footer = document()
        .query_selector("footer")
        .expect("never fails here")
        .expect("never fails here");
    footer.append_child(&by_id("in")).expect("never fails here");
    let (kind, message) = err(&tools, &json(&call)).await;
    assert_eq!(kind, "not_found");
    assert!(message.contains("outside the widget's scope"), "{message}");
    let scroll = format!(r#"{{"name": "scroll_page", "args": {{"ref": "{reference}"}}}}"#);
    let (kind, _) = err(&tools, &json(&scroll)).await;
    assert_eq!(kind, "not_found");
    assert_eq!(clicks.get(), 2);

    // The gate's facts: inside answered, outside refused.
    let facts = JsFuture::from(tools.describe(&json(r##"{"selector": "#field"}"##)))
        .await
        .expect("never fails here");
    assert_eq!(text(&get(&get(&facts, "Ok"), "field"), "tag"), "input");
    let facts = JsFuture::from(tools.describe(&json(r##"{"selector": "#out-field"}"##)))
        .await
        .expect("never fails here");
    assert_eq!(text(&get(&facts, "Err"), "kind"), "not_found");
    drop(counter);
}

#[wasm_bindgen_test]
async fn typing_into_a_field_inside_the_scope_works() {
    page(SCOPED_PAGE);
    let inputs = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let on_input = {
        let inputs = inputs.clone();
        Closure::<dyn FnMut()>::new(move || inputs.set(inputs.get() + 1))
    };
    by_id("field")
        .add_event_listener_with_callback("input", on_input.as_ref().unchecked_ref())
        .expect("never fails here");
    let tools = PageTools::new(Some(by_id("scope")), &ACT_TOOLS);
    let typed = ok(
        &tools,
        r##"{"name": "type_text", "args": {"selector": "#field", "text": "hello"}}"##,
    )
    .await;
    assert!(typed.is_object());
    assert_eq!(text(&by_id("field"), "value"), "hello");
    assert!(inputs.get() >= 1, "the page saw no input event");
    assert_eq!(text(&by_id("out-field"), "value"), "");
    drop(on_input);
}

#[wasm_bindgen_test]
async fn the_allow_list_refuses_other_tools() {
    page(SCOPED_PAGE);
    let tools = PageTools::new(Some(by_id("scope")), &READ_TOOLS);
    assert_eq!(tools.allowed(), READ_TOOLS);
    for call in [
        r##"{"name": "click_element", "args": {"selector": "#in"}}"##,
        r##"{"name": "type_text", "args": {"selector": "#field", "text": "x"}}"##,
    ] {
        let (kind, message) = err(&tools, &json(call)).await;
        assert_eq!(kind, "blocked");
        assert!(message.contains("not allowed on this page"), "{message}");
        assert!(
            message.contains("snapshot_page, read_page_content, get_page_title, scroll_page"),
            "{message}"
        );
    }
    assert_eq!(text(&by_id("field"), "value"), "");
    // Reads and scrolling run.
    ok(&tools, r#"{"name": "get_page_title", "args": {}}"#).await;
    ok(
        &tools,
        r#"{"name": "scroll_page", "args": {"direction": "down"}}"#,
    )
    .await;
    // No tools at all.
    let none = PageTools::new(None, &[]);
    let (kind, message) = err(&none, &json(r#"{"name": "snapshot_page", "args": {}}"#)).await;
    assert_eq!(kind, "blocked");
    assert!(message.contains("allows no page tools"), "{message}");
    // Allowed but not in-page.
    let shots = PageTools::new(None, &[Tool::TakeScreenshot]);
    let (kind, _) = err(&shots, &json(r#"{"name": "take_screenshot", "args": {}}"#)).await;
    assert_eq!(kind, "unavailable");
}

#[wasm_bindgen_test]
async fn odd_input_is_an_error_never_a_panic() {
    page(SCOPED_PAGE);
    let tools = PageTools::new(Some(by_id("scope")), &ACT_TOOLS);
    let odd = [
        JsValue::NULL,
        JsValue::UNDEFINED,
        JsValue::from(5),
        json(r#"{"name": 5}"#),
        json(r#"{"name": "no_such_tool", "args": {}}"#),
        json(r#"{"name": "click_element", "args": 7}"#),
        json(r#"{"name": "click_element", "args": {"selector": "[[["}}"#),
        json(r#"{"name": "click_element", "args": {"ref": "e99999"}}"#),
        json(r#"{"name": "click_element", "args": {"ref": "banana"}}"#),
        json(r#"{"name": "read_page_content", "args": {"max_chars": -1}}"#),
        json(r#"{"name": "scroll_page", "args": {"direction": "sideways"}}"#),
    ];
    for call in &odd {
        let (kind, message) = err(&tools, call).await;
        assert!(!kind.is_empty() && !message.is_empty());
    }
    for target in [JsValue::NULL, json("{}"), json(r#"{"selector": 3}"#)] {
        let facts = JsFuture::from(tools.describe(&target))
            .await
            .expect("never fails here");
        assert!(get(&facts, "Err").is_object());
    }
    // Still working afterwards.
    ok(&tools, r#"{"name": "snapshot_page", "args": {}}"#).await;
}

#[wasm_bindgen_test]
async fn a_page_that_replaced_query_selector_and_push_does_not_break_the_tools() {
    page(SCOPED_PAGE);
    let window = js_sys::global();
    let proto = |ctor: &str| get(&get(&window, ctor), "prototype");
    let element = proto("Element");
    let document_proto = proto("Document");
    let array = proto("Array");
    let saved = [
        (
            element.clone(),
            "querySelector",
            get(&element, "querySelector"),
        ),
        (
            element.clone(),
            "querySelectorAll",
            get(&element, "querySelectorAll"),
        ),
        (
            document_proto.clone(),
            "querySelector",
            get(&document_proto, "querySelector"),
        ),
        (array.clone(), "push", get(&array, "push")),
    ];
    // A hostile page: lookups find nothing, and push throws — for calls made with our wasm on
    // the stack. Anyone else (ChromeDriver's scripts, which the test runner polls the page
    // with in the page's own world while this test awaits) gets the original behaviour: a
    // runner that met the hostile methods crashed ("missing field `chunk`"). A wasm frame
    // reads `wasm-function[N]`; a plain `/wasm/` also matched every caller, since the hostile
    // function's own frame names the page it was made on (`.../wasm-bindgen-test`).
    let hostile = |original: &JsValue, behaviour: &str| -> JsValue {
        js_sys::Function::new_with_args(
            "original",
            &format!(
                "return function (...args) {{ \
                   if (/wasm-function\\[/.test(String(new Error().stack))) {{ {behaviour} }} \
                   return original.apply(this, args); }};"
            ),
        )
        .call1(&JsValue::NULL, original)
        .expect("never fails here")
    };
    let nothing = hostile(&saved[0].2, "return null;");
    let empty = hostile(&saved[1].2, "return [];");
    let nothing_doc = hostile(&saved[2].2, "return null;");
    let throws = hostile(&saved[3].2, "throw new Error('hostile push');");
    Reflect::set(&element, &"querySelector".into(), &nothing).expect("never fails here");
    Reflect::set(&element, &"querySelectorAll".into(), &empty).expect("never fails here");
    Reflect::set(&document_proto, &"querySelector".into(), &nothing_doc).expect("never fails here");
    Reflect::set(&array, &"push".into(), &throws).expect("never fails here");
    // The hostile methods do bite a caller in wasm.
    let probe = js_sys::Array::new();
    assert!(
        Reflect::apply(
            throws.unchecked_ref::<js_sys::Function>(),
            &probe,
            &js_sys::Array::of1(&JsValue::from(1))
        )
        .is_err(),
        "the hostile push let a wasm caller through"
    );
    // ... and spare a caller without wasm on its stack (a timer's script, as ChromeDriver's).
    web_sys::window()
        .expect("window")
        .set_timeout_with_str("window.__ggPlainPush = (function () { \
            try { const a = []; a.push(1); return a.length === 1 && document.querySelector('#field') !== null ? 'spared' : 'bitten'; } \
            catch (e) { return 'threw: ' + e; } })();")
        .expect("timer");
    sleep(20).await;
    let plain_caller = get(&window, "__ggPlainPush").as_string();

    let tools = PageTools::new(Some(by_id("scope")), &ACT_TOOLS);
    let snap = tools.run(&json(r#"{"name": "snapshot_page", "args": {}}"#));
    let snap = JsFuture::from(snap).await.expect("never fails here");
    let typed = tools.run(&json(
        r##"{"name": "type_text", "args": {"selector": "#field", "text": "still works"}}"##,
    ));
    let typed = JsFuture::from(typed).await.expect("never fails here");
    let refused = tools.run(&json(
        r##"{"name": "click_element", "args": {"selector": "#out"}}"##,
    ));
    let refused = JsFuture::from(refused).await.expect("never fails here");
    let facts = JsFuture::from(tools.describe(&json(r##"{"selector": "#in"}"##)))
        .await
        .expect("never fails here");

    for (target, name, original) in saved {
        Reflect::set(&target, &name.into(), &original).expect("never fails here");
    }
    assert_eq!(
        plain_caller.as_deref(),
        Some("spared"),
        "the hostile methods bit a caller without wasm: the test runner's polls would crash"
    );
    let outline = text(&get(&get(&snap, "Ok"), "value"), "outline");
    assert!(outline.contains("Inside button"), "{outline}");
    assert!(
        get(&typed, "Ok").is_object(),
        "{:?}",
        JSON::stringify(&typed)
    );
    assert_eq!(text(&by_id("field"), "value"), "still works");
    assert_eq!(text(&get(&refused, "Err"), "kind"), "not_found");
    assert_eq!(text(&get(&get(&facts, "Ok"), "field"), "tag"), "button");
}

#[wasm_bindgen_test]
async fn the_scope_and_the_allow_list_follow_the_page() {
    page(SCOPED_PAGE);
    let tools = PageTools::new(Some(by_id("scope")), &READ_TOOLS);
    let (kind, _) = err(
        &tools,
        &json(r##"{"name": "click_element", "args": {"selector": "#in"}}"##),
    )
    .await;
    assert_eq!(kind, "blocked");
    tools.set_allowed(&ACT_TOOLS);
    ok(
        &tools,
        r##"{"name": "click_element", "args": {"selector": "#in"}}"##,
    )
    .await;
    // Another scope: the footer's field is inside now, the main's button outside.
    let footer = document()
        .query_selector("footer")
        .expect("query")
        .expect("a footer");
    tools.set_scope(Some(footer));
    ok(
        &tools,
        r##"{"name": "type_text", "args": {"selector": "#out-field", "text": "now inside"}}"##,
    )
    .await;
    assert_eq!(text(&by_id("out-field"), "value"), "now inside");
    let (_, message) = err(
        &tools,
        &json(r##"{"name": "click_element", "args": {"selector": "#in"}}"##),
    )
    .await;
    assert!(message.contains("outside the widget's scope"), "{message}");
    // The page removed the scope's element.
    page("<p>re-rendered</p>");
    let (kind, message) = err(&tools, &json(r#"{"name": "snapshot_page", "args": {}}"#)).await;
    assert_eq!(kind, "unavailable");
    assert!(message.contains("no longer in the page"), "{message}");
}

/// A typed call, as the widget's worker sends it (`WorkerMessage::RunTool`).
fn typed(call: &str) -> gg_agent::ToolCall {
    serde_json::from_str(call).unwrap_or_else(|e| panic!("bad call in the test: {e}"))
}

#[wasm_bindgen_test]
async fn typed_calls_and_facts_answer_with_the_agents_types() {
    page(SCOPED_PAGE);
    let tools = PageTools::new(Some(by_id("scope")), &ACT_TOOLS);
    let snap = tools
        .call(&typed(
            r#"{"name": "snapshot_page", "args": {"max_tokens": 500}}"#,
        ))
        .await
        .unwrap_or_else(|e| panic!("snapshot failed: {e:?}"));
    let outline = snap.value["outline"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(outline.contains("Inside button"), "{outline}");
    assert!(!outline.contains("Outside"), "{outline}");
    assert!(snap.value["elements_shown"].as_f64().unwrap_or(0.0) >= 3.0);

    let typed_ok = tools
        .call(&typed(
            r##"{"name": "type_text", "args": {"selector": "#field", "text": "typed"}}"##,
        ))
        .await;
    assert!(typed_ok.is_ok(), "{typed_ok:?}");
    assert_eq!(text(&by_id("field"), "value"), "typed");

    let refused = tools
        .call(&typed(
            r##"{"name": "click_element", "args": {"selector": "#out"}}"##,
        ))
        .await;
    let e = refused.expect_err("outside the scope");
    assert_eq!(e.kind, gg_vocab::ToolErrorKind::NotFound);
    assert!(
        e.message.contains("outside the widget's scope"),
        "{}",
        e.message
    );

    let facts = tools
        .element_facts(&gg_agent::ElementTarget::Selector("#field".into()))
        .await
        .unwrap_or_else(|e| panic!("facts failed: {e:?}"));
    assert_eq!(facts.field.tag, "input");
    assert!(!facts.is_submit);
    let outside = tools
        .element_facts(&gg_agent::ElementTarget::Selector("#out-field".into()))
        .await;
    assert_eq!(
        outside.expect_err("outside").kind,
        gg_vocab::ToolErrorKind::NotFound
    );

    let read_only = PageTools::new(None, &READ_TOOLS);
    let blocked = read_only
        .call(&typed(
            r##"{"name": "click_element", "args": {"ref": "e1"}}"##,
        ))
        .await;
    assert_eq!(
        blocked.expect_err("not allowed").kind,
        gg_vocab::ToolErrorKind::Blocked
    );
}

#[wasm_bindgen_test]
async fn a_long_walk_gives_the_page_its_main_thread_between_slices() {
    let mut html = String::from(r#"<main id="scope">"#);
    for i in 0..4000 {
        html.push_str(&format!("<div><button>Button {i}</button></div>"));
    }
    html.push_str("</main>");
    page(&html);
    // A page task that runs again and again (a zero-delay timer chain) while the walk runs.
    let ticks = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let running = std::rc::Rc::new(std::cell::Cell::new(true));
    let tick: std::rc::Rc<std::cell::RefCell<Option<JsValue>>> = Default::default();
    let f = {
        let (ticks, running, tick) = (ticks.clone(), running.clone(), tick.clone());
        Closure::<dyn FnMut()>::new(move || {
            ticks.set(ticks.get() + 1);
            if running.get()
                && let Some(f) = tick.borrow().as_ref()
            {
                let _ = web_sys::window()
                    .expect("window")
                    .set_timeout_with_callback(f.unchecked_ref());
            }
        })
        .into_js_value()
    };
    *tick.borrow_mut() = Some(f.clone());
    let tools = PageTools::new(Some(by_id("scope")), &READ_TOOLS);
    let promise = tools.run(&json(
        r#"{"name": "snapshot_page", "args": {"max_tokens": 100000}}"#,
    ));
    web_sys::window()
        .expect("window")
        .set_timeout_with_callback(f.unchecked_ref())
        .expect("timer");
    let start = js_sys::Date::now();
    let snap = JsFuture::from(promise).await.expect("never rejects");
    let took = js_sys::Date::now() - start;
    running.set(false);
    let outline = text(&get(&get(&snap, "Ok"), "value"), "outline");
    assert!(outline.contains("Button 3999"), "the walk did not finish");
    // The page's timer ran between the slices: about once per 4 ms slice and the 4 ms timer
    // clamp (88 times in a 1,050 ms walk, debug build, 2 busy cores); asserted: at least once
    // per 50 ms (the long-task threshold) on average. In one task it would run once.
    assert!(
        ticks.get() > 2 && f64::from(ticks.get()) >= took / 50.0,
        "the page ran {} tasks during a {took} ms walk",
        ticks.get()
    );
    *tick.borrow_mut() = None;
}
