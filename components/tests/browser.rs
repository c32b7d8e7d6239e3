//! Interaction tests in a real browser (headless Chromium through `wasm-bindgen-test-runner`):
//! send, stop, approvals, settings callbacks, streaming without re-rendering earlier messages,
//! the closed shadow root and hostile page CSS.
#![cfg(target_arch = "wasm32")]

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use gg_components::mock;
use gg_components::*;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;
use web_sys::{Element, HtmlElement, HtmlInputElement, HtmlSelectElement, HtmlTextAreaElement};
use yew::html::BaseComponent;
use yew::prelude::*;

wasm_bindgen_test_configure!(run_in_browser);

fn document() -> web_sys::Document {
    web_sys::window()
        .and_then(|w| w.document())
        .expect("document")
}

/// Renders `C` into a fresh `<div>` in the body.
fn mount<C: BaseComponent>(props: C::Properties) -> (Element, yew::AppHandle<C>) {
    let root = document().create_element("div").expect("div");
    document()
        .body()
        .expect("body")
        .append_child(&root)
        .expect("append");
    let app = yew::Renderer::<C>::with_root_and_props(root.clone(), props).render();
    (root, app)
}

async fn settle() {
    yew::scheduler::flush().await;
}

fn by_id(root: &impl AsRef<web_sys::Node>, id: &str) -> Option<HtmlElement> {
    let node: &web_sys::Node = root.as_ref();
    let selector = format!("[data-testid=\"{id}\"]");
    let found = if let Some(el) = node.dyn_ref::<Element>() {
        el.query_selector(&selector)
    } else if let Some(sr) = node.dyn_ref::<web_sys::ShadowRoot>() {
        sr.query_selector(&selector)
    } else {
        Ok(None)
    };
    found
        .ok()
        .flatten()
        .and_then(|e| e.dyn_into::<HtmlElement>().ok())
}

fn get(root: &impl AsRef<web_sys::Node>, id: &str) -> HtmlElement {
    by_id(root, id).unwrap_or_else(|| panic!("no element with data-testid={id}"))
}

fn all(root: &Element, selector: &str) -> Vec<Element> {
    let list = root.query_selector_all(selector).expect("selector");
    (0..list.length())
        .filter_map(|i| list.item(i))
        .filter_map(|n| n.dyn_into::<Element>().ok())
        .collect()
}

/// Waits until the approval card's buttons are armed (fully visible for
/// `arming::ARM_DELAY_MS`), as a user sees them enable; panics after 5 s.
async fn until_armed(root: &Element) {
    // Earlier tests' roots stay in the body: bring the card into the viewport as a user would.
    get(root, "gg-approval").scroll_into_view();
    for _ in 0..250 {
        settle().await;
        if get(root, "gg-approval")
            .get_attribute("data-arming")
            .as_deref()
            == Some("armed")
        {
            return;
        }
        gloo_timers::future::TimeoutFuture::new(20).await;
    }
    panic!(
        "the approval buttons never armed (data-arming={:?})",
        get(root, "gg-approval").get_attribute("data-arming")
    );
}

fn fire(target: &Element, kind: &str) {
    let init = web_sys::EventInit::new();
    init.set_bubbles(true);
    init.set_cancelable(true);
    let event = web_sys::Event::new_with_event_init_dict(kind, &init).expect("event");
    target.dispatch_event(&event).expect("dispatch");
}

fn key(target: &Element, key: &str, shift: bool, alt: bool) -> bool {
    let init = web_sys::KeyboardEventInit::new();
    init.set_key(key);
    init.set_shift_key(shift);
    init.set_alt_key(alt);
    init.set_bubbles(true);
    init.set_cancelable(true);
    let event = web_sys::KeyboardEvent::new_with_keyboard_event_init_dict("keydown", &init)
        .expect("keydown");
    target.dispatch_event(&event).expect("dispatch")
}

/// Dispatches a `keyup` of `key` on `target`.
fn key_up(target: &Element, key: &str) {
    let init = web_sys::KeyboardEventInit::new();
    init.set_key(key);
    init.set_bubbles(true);
    init.set_cancelable(true);
    let event =
        web_sys::KeyboardEvent::new_with_keyboard_event_init_dict("keyup", &init).expect("keyup");
    target.dispatch_event(&event).expect("dispatch");
}

async fn type_into(root: &Element, text: &str) -> HtmlTextAreaElement {
    let input: HtmlTextAreaElement = get(root, "gg-input").dyn_into().expect("textarea");
    input.set_value(text);
    fire(&input, "input");
    settle().await;
    input
}

/// A callback that records what it is given.
fn recorder<T: 'static>() -> (Callback<T>, Rc<RefCell<Vec<T>>>) {
    let log = Rc::new(RefCell::new(Vec::new()));
    let sink = log.clone();
    (Callback::from(move |v| sink.borrow_mut().push(v)), log)
}

fn overlay_props(
    messages: Vec<Rc<ChatMessage>>,
    model: ModelStatus,
    generating: bool,
) -> ChatOverlayProps {
    yew::props!(ChatOverlayProps {
        messages,
        markdown: MarkdownParser::here(),
        model,
        generating,
        on_send: Callback::noop(),
    })
}

#[wasm_bindgen_test]
async fn enter_sends_shift_enter_does_not_and_send_button_sends() {
    let (on_send, sent) = recorder::<Outgoing>();
    let mut props = overlay_props(vec![], mock::model_ready(), false);
    props.on_send = on_send;
    let (root, app) = mount::<ChatOverlay>(props);
    settle().await;

    let send: web_sys::HtmlButtonElement = get(&root, "gg-send").dyn_into().expect("button");
    assert!(send.disabled(), "Send is disabled while the input is empty");

    let input = type_into(&root, "first line").await;
    assert!(
        key(&input, "Enter", true, false),
        "Shift+Enter is left to the textarea (newline)"
    );
    settle().await;
    assert!(sent.borrow().is_empty(), "Shift+Enter must not send");

    assert!(
        !key(&input, "Enter", false, false),
        "Enter is handled (default prevented)"
    );
    settle().await;
    assert_eq!(*sent.borrow(), vec![Outgoing::text("first line")]);
    assert_eq!(input.value(), "", "the input is cleared after sending");

    type_into(&root, "  second  ").await;
    get(&root, "gg-send").click();
    settle().await;
    assert_eq!(
        *sent.borrow(),
        vec![Outgoing::text("first line"), Outgoing::text("second")]
    );

    // Blank input never sends.
    let input = type_into(&root, "   ").await;
    key(&input, "Enter", false, false);
    settle().await;
    assert_eq!(sent.borrow().len(), 2);
    app.destroy();
}

#[wasm_bindgen_test]
async fn input_is_disabled_while_the_model_loads() {
    let (on_send, sent) = recorder::<Outgoing>();
    let mut props = overlay_props(vec![], mock::model_downloading(), false);
    props.on_send = on_send;
    let (root, app) = mount::<ChatOverlay>(props);
    settle().await;
    let input: HtmlTextAreaElement = get(&root, "gg-input").dyn_into().expect("textarea");
    assert!(input.disabled());
    input.set_value("hi");
    fire(&input, "input");
    key(&input, "Enter", false, false);
    settle().await;
    assert!(sent.borrow().is_empty(), "nothing is sent while loading");
    let status = get(&root, "gg-model-status");
    assert_eq!(
        status.get_attribute("data-status").as_deref(),
        Some("downloading")
    );
    assert!(status.text_content().unwrap_or_default().contains("33%"));
    app.destroy();
}

#[wasm_bindgen_test]
async fn stop_and_new_chat_emit() {
    let (on_stop, stops) = recorder::<()>();
    let (on_new_chat, new_chats) = recorder::<()>();
    let (on_open_settings, opened) = recorder::<()>();
    let mut props = overlay_props(mock::streaming(), mock::model_ready(), true);
    props.on_stop = on_stop;
    props.on_new_chat = on_new_chat;
    props.on_open_settings = on_open_settings;
    let (root, app) = mount::<ChatOverlay>(props);
    settle().await;
    assert!(
        by_id(&root, "gg-send").is_none(),
        "Stop replaces Send while generating"
    );
    get(&root, "gg-stop").click();
    get(&root, "gg-new-chat").click();
    get(&root, "gg-settings-open").click();
    settle().await;
    assert_eq!(stops.borrow().len(), 1);
    assert_eq!(new_chats.borrow().len(), 1);
    assert_eq!(opened.borrow().len(), 1);
    app.destroy();
}

#[wasm_bindgen_test]
async fn approval_buttons_emit_call_id_and_decision() {
    let (on_approve, answers) = recorder::<(String, ApprovalDecision)>();
    let (root, app) = mount::<ToolTimeline>(yew::props!(ToolTimelineProps {
        steps: mock::tool_steps(),
        on_approve,
    }));
    settle().await;
    let rows = all(&root, "[data-testid=gg-tool-step]");
    assert_eq!(rows.len(), 6);
    let states: Vec<String> = rows
        .iter()
        .filter_map(|r| r.get_attribute("data-state"))
        .collect();
    assert_eq!(
        states,
        [
            "pending",
            "done",
            "done",
            "running",
            "failed",
            "awaiting_approval"
        ]
    );
    // Before the buttons arm, they are disabled and a click (even a synthetic one) is nothing.
    assert_eq!(
        get(&root, "gg-approval")
            .get_attribute("data-arming")
            .as_deref(),
        Some("waiting")
    );
    let once = get(&root, "gg-approve-once")
        .dyn_into::<web_sys::HtmlButtonElement>()
        .expect("button");
    assert!(once.disabled(), "disabled until armed");
    once.click();
    settle().await;
    assert!(
        answers.borrow().is_empty(),
        "no answer before the buttons armed"
    );
    until_armed(&root).await;
    assert!(!once.disabled());
    get(&root, "gg-approve-once").click();
    get(&root, "gg-approve-always").click();
    get(&root, "gg-deny").click();
    settle().await;
    assert_eq!(
        *answers.borrow(),
        vec![
            ("c6".to_owned(), ApprovalDecision::AllowOnce),
            ("c6".to_owned(), ApprovalDecision::AlwaysOnSite),
            ("c6".to_owned(), ApprovalDecision::Deny),
        ]
    );
    app.destroy();
}

#[wasm_bindgen_test]
async fn settings_changes_emit_the_new_settings() {
    let (on_change, changes) = recorder::<Settings>();
    let (on_clear_model, cleared) = recorder::<ModelChoice>();
    let base = mock::settings();
    let (root, app) = mount::<SettingsPanel>(yew::props!(SettingsPanelProps {
        settings: base.clone(),
        models: mock::models(),
        site: Some(AttrValue::from(mock::SITE)),
        on_change,
        on_clear_model,
    }));
    settle().await;
    let last = || {
        changes
            .borrow()
            .last()
            .cloned()
            .expect("a change was emitted")
    };

    let thinking: HtmlInputElement = get(&root, "gg-setting-thinking")
        .dyn_into()
        .expect("checkbox");
    assert!(thinking.checked());
    thinking.click(); // toggles and fires `change`
    settle().await;
    assert!(!last().thinking);
    assert_eq!(
        Settings {
            thinking: true,
            ..last()
        },
        base,
        "only `thinking` changed"
    );

    let model: HtmlSelectElement = get(&root, "gg-setting-model").dyn_into().expect("select");
    model.set_value("e4b");
    fire(&model, "change");
    settle().await;
    assert_eq!(last().model, ModelChoice::E4b);

    let iterations: HtmlInputElement = get(&root, "gg-setting-max-iterations")
        .dyn_into()
        .expect("number");
    iterations.set_value("500");
    fire(&iterations, "change");
    settle().await;
    assert_eq!(
        last().max_iterations,
        Settings::MAX_ITERATIONS_RANGE.1,
        "clamped to the maximum"
    );

    let temperature: HtmlInputElement = get(&root, "gg-setting-temperature")
        .dyn_into()
        .expect("range");
    temperature.set_value("0.3");
    fire(&temperature, "input");
    settle().await;
    assert!((last().temperature - 0.3).abs() < 1e-6);

    get(&root, "gg-site-remove").click();
    settle().await;
    assert_eq!(
        last().disabled_sites,
        vec!["https://mail.example".to_owned()]
    );

    get(&root, "gg-disable-site").click();
    settle().await;
    assert!(last().disabled_sites.contains(&mock::SITE.to_owned()));

    get(&root, "gg-permission-remove").click();
    settle().await;
    assert_eq!(last().site_permissions.len(), 1);
    assert_eq!(last().site_permissions[0].site, "https://news.example");

    let source: HtmlSelectElement = get(&root, "gg-setting-source").dyn_into().expect("select");
    let before = changes.borrow().len();
    source.set_value("mirror");
    fire(&source, "change");
    settle().await;
    assert_eq!(
        changes.borrow().len(),
        before,
        "no change until a valid mirror URL is entered"
    );
    let url: HtmlInputElement = get(&root, "gg-setting-mirror-url").dyn_into().expect("url");
    url.set_value("ftp://nope");
    fire(&url, "input");
    fire(&url, "change");
    settle().await;
    assert_eq!(
        changes.borrow().len(),
        before,
        "an invalid URL is not applied"
    );
    assert_eq!(url.get_attribute("aria-invalid").as_deref(), Some("true"));
    url.set_value("https://mirror.example/hf");
    fire(&url, "input");
    fire(&url, "change");
    settle().await;
    assert_eq!(
        last().model_source,
        ModelSource::Mirror("https://mirror.example/hf".into())
    );

    let clear = all(&root, "[data-testid=gg-clear-model]");
    let e4b = clear
        .iter()
        .find(|b| b.get_attribute("data-model").as_deref() == Some("e4b"))
        .expect("a clear button for e4b");
    e4b.dyn_ref::<HtmlElement>().expect("button").click();
    settle().await;
    assert_eq!(*cleared.borrow(), vec![ModelChoice::E4b]);
    app.destroy();
}

#[wasm_bindgen_test]
async fn launcher_click_and_keyboard_corner_moves() {
    let (on_click, clicks) = recorder::<()>();
    let (on_corner_change, corners) = recorder::<Corner>();
    let (root, app) = mount::<Launcher>(yew::props!(LauncherProps {
        status: LauncherStatus::Thinking,
        on_click,
        on_corner_change,
        fixed: false,
    }));
    settle().await;
    let button = get(&root, "gg-launcher");
    assert_eq!(
        button.get_attribute("data-status").as_deref(),
        Some("thinking")
    );
    button.click();
    assert!(
        !key(&button, "ArrowLeft", false, true),
        "Alt+ArrowLeft is handled"
    );
    key(&button, "ArrowLeft", false, false); // without Alt: ignored
    key(&button, "ArrowUp", false, true);
    settle().await;
    assert_eq!(clicks.borrow().len(), 1);
    // The prop stays BottomRight (the test does not feed it back): each move is from there.
    assert_eq!(
        *corners.borrow(),
        vec![Corner::BottomLeft, Corner::TopRight]
    );
    app.destroy();
}

fn pointer(target: &Element, kind: &str, x: i32, y: i32) {
    let init = web_sys::PointerEventInit::new();
    init.set_pointer_id(7);
    init.set_button(0);
    init.set_client_x(x);
    init.set_client_y(y);
    init.set_bubbles(true);
    init.set_cancelable(true);
    let event =
        web_sys::PointerEvent::new_with_event_init_dict(kind, &init).expect("pointer event");
    target.dispatch_event(&event).expect("dispatch");
}

#[wasm_bindgen_test]
async fn launcher_drag_snaps_to_the_nearest_corner_and_is_not_a_click() {
    let (on_click, clicks) = recorder::<()>();
    let (on_corner_change, corners) = recorder::<Corner>();
    let (root, app) = mount::<Launcher>(yew::props!(LauncherProps {
        on_click,
        on_corner_change,
        corner: Corner::BottomRight,
    }));
    settle().await;
    let button = get(&root, "gg-launcher");
    pointer(&button, "pointerdown", 600, 500);
    settle().await;
    pointer(&button, "pointermove", 300, 250);
    settle().await;
    assert_eq!(
        button.get_attribute("data-dragging").as_deref(),
        Some("true")
    );
    assert!(
        button
            .get_attribute("style")
            .unwrap_or_default()
            .contains("translate(-300px, -250px)"),
        "the button follows the pointer: {:?}",
        button.get_attribute("style")
    );
    pointer(&button, "pointermove", 10, 10);
    pointer(&button, "pointerup", 10, 10);
    settle().await;
    button.click(); // the click that ends a drag
    settle().await;
    assert_eq!(*corners.borrow(), vec![Corner::TopLeft]);
    assert!(clicks.borrow().is_empty(), "a drag does not open the panel");
    assert_eq!(
        button.get_attribute("data-dragging").as_deref(),
        Some("false")
    );

    // A press without movement is a click.
    pointer(&button, "pointerdown", 600, 500);
    pointer(&button, "pointerup", 601, 501);
    button.click();
    settle().await;
    assert_eq!(clicks.borrow().len(), 1);
    assert_eq!(corners.borrow().len(), 1);
    app.destroy();
}

#[wasm_bindgen_test]
async fn code_block_copy_button_reports_and_resets() {
    let (root, app) = mount::<ChatOverlay>(overlay_props(
        mock::code_and_thinking(),
        mock::model_ready(),
        false,
    ));
    settle().await;
    let copy = get(&root, "gg-copy-code");
    assert_eq!(copy.text_content().as_deref(), Some("Copy"));
    copy.click();
    // The clipboard promise settles either way (headless Chromium may refuse the permission).
    let mut waited = 0;
    while copy.text_content().as_deref() == Some("Copy") && waited < 1_000 {
        gloo_timers::future::TimeoutFuture::new(20).await;
        waited += 20;
    }
    let label = copy.text_content().unwrap_or_default();
    assert!(label == "Copied" || label == "Copy failed", "{label}");
    gloo_timers::future::TimeoutFuture::new(1_700).await;
    settle().await;
    assert_eq!(
        copy.text_content().as_deref(),
        Some("Copy"),
        "the label resets"
    );
    app.destroy();
}

/// A host for the streaming test: the reducer plus a per-message render counter.
#[derive(Properties, PartialEq)]
struct StreamHostProps {
    on_ready: Callback<ChatDispatcher>,
    renders: Rc<RefCell<HashMap<MessageId, usize>>>,
}

#[function_component(StreamHost)]
fn stream_host(props: &StreamHostProps) -> Html {
    let state = use_reducer(ChatState::default);
    {
        let dispatcher = state.dispatcher();
        let on_ready = props.on_ready.clone();
        use_effect_with((), move |_| on_ready.emit(dispatcher));
    }
    let on_message_render = {
        let renders = props.renders.clone();
        use_callback((), move |id: MessageId, _| {
            *renders.borrow_mut().entry(id).or_default() += 1
        })
    };
    html! {
        <ChatOverlay messages={state.messages.clone()} markdown={MarkdownParser::here()} generating={state.generating}
            model={state.model.clone()} on_send={Callback::noop()} on_message_render={Some(on_message_render)} />
    }
}

#[wasm_bindgen_test]
async fn streaming_appends_without_re_rendering_earlier_messages() {
    let (on_ready, ready) = recorder::<ChatDispatcher>();
    let renders = Rc::new(RefCell::new(HashMap::new()));
    let (root, app) = mount::<StreamHost>(StreamHostProps {
        on_ready,
        renders: renders.clone(),
    });
    settle().await;
    let dispatch = ready.borrow().first().cloned().expect("dispatcher");

    dispatch.dispatch(Action::UserSent {
        text: "first".into(),
        images: Vec::new(),
    });
    dispatch.dispatch(Action::Token {
        text: "An **earlier** answer.".into(),
    });
    dispatch.dispatch(Action::TurnFinished);
    dispatch.dispatch(Action::UserSent {
        text: "second".into(),
        images: Vec::new(),
    });
    dispatch.dispatch(Action::Token {
        text: "Streaming".into(),
    });
    settle().await;
    let messages = all(&root, "[data-testid=gg-message]");
    assert_eq!(messages.len(), 4);
    let earlier: Vec<Element> = messages[..3].to_vec();
    let streaming_paragraph = messages[3]
        .query_selector("p")
        .ok()
        .flatten()
        .expect("first paragraph");

    // Watch the earlier messages for any DOM change.
    let records = Rc::new(RefCell::new(0u32));
    let sink = records.clone();
    let observer_cb = Closure::<dyn FnMut(js_sys::Array)>::new(move |batch: js_sys::Array| {
        *sink.borrow_mut() += batch.length();
    });
    let observer =
        web_sys::MutationObserver::new(observer_cb.as_ref().unchecked_ref()).expect("observer");
    let options = web_sys::MutationObserverInit::new();
    options.set_subtree(true);
    options.set_child_list(true);
    options.set_character_data(true);
    options.set_attributes(true);
    for el in &earlier {
        observer
            .observe_with_options(el, &options)
            .expect("observe");
    }
    renders.borrow_mut().clear();

    for token in [" one", " two", " three", " four", " five"] {
        dispatch.dispatch(Action::Token { text: token.into() });
        settle().await;
    }
    let pending = observer.take_records();
    observer.disconnect();
    let mutations = *records.borrow() + pending.length();

    let counts = renders.borrow().clone();
    for id in [0, 1, 2] {
        assert_eq!(
            counts.get(&id),
            None,
            "message {id} re-rendered while another streamed: {counts:?}"
        );
    }
    assert_eq!(
        counts.get(&3),
        Some(&5),
        "the streaming message renders once per token: {counts:?}"
    );
    assert_eq!(mutations, 0, "earlier messages' DOM changed");
    let text = messages[3].text_content().unwrap_or_default();
    assert!(text.contains("Streaming one two three four five"), "{text}");
    let paragraph_now = messages[3]
        .query_selector("p")
        .ok()
        .flatten()
        .expect("paragraph");
    assert!(
        paragraph_now.is_same_node(Some(&streaming_paragraph)),
        "the streaming paragraph is updated in place, not replaced"
    );
    app.destroy();
}

#[wasm_bindgen_test]
async fn gem_app_round_trip_with_host_events() {
    let (on_intent, intents) = recorder::<UiIntent>();
    let (on_ready, ready) = recorder::<ChatDispatcher>();
    let initial = ChatState {
        model: mock::model_ready(),
        site: Some(mock::SITE.into()),
        ..ChatState::default()
    };
    let (root, app) = mount::<GemApp>(yew::props!(GemAppProps {
        markdown: MarkdownParser::here(),
        initial: Some(Rc::new(initial)),
        on_intent,
        on_ready,
    }));
    settle().await;
    let dispatch = ready.borrow().first().cloned().expect("dispatcher");
    assert!(
        by_id(&root, "gg-panel").is_none(),
        "the panel starts closed"
    );
    get(&root, "gg-launcher").click();
    settle().await;
    assert!(by_id(&root, "gg-panel").is_some());
    let focused = document()
        .active_element()
        .and_then(|e| e.get_attribute("data-testid"));
    assert_eq!(
        focused.as_deref(),
        Some("gg-input"),
        "opening the panel focuses the input"
    );

    let input = type_into(&root, "Buy the cheapest laptop").await;
    key(&input, "Enter", false, false);
    settle().await;
    let roles: Vec<String> = all(&root, "[data-testid=gg-message]")
        .iter()
        .filter_map(|m| m.get_attribute("data-role"))
        .collect();
    assert_eq!(roles, ["user", "assistant"]);
    assert_eq!(
        get(&root, "gg-launcher")
            .get_attribute("data-status")
            .as_deref(),
        Some("thinking")
    );

    dispatch.dispatch(Action::Thinking {
        text: "Find prices.".into(),
    });
    dispatch.dispatch(Action::ToolStarted {
        step: ToolStep::new("t1", "run_javascript", serde_json::json!({"code": "1"})),
    });
    dispatch.dispatch(Action::ApprovalRequested {
        call_id: "t1".into(),
        reason: "Runs code".into(),
    });
    settle().await;
    assert!(by_id(&root, "gg-thinking").is_some());
    assert_eq!(
        get(&root, "gg-tool-step")
            .get_attribute("data-state")
            .as_deref(),
        Some("awaiting_approval")
    );
    assert_eq!(
        get(&root, "gg-launcher")
            .get_attribute("data-status")
            .as_deref(),
        Some("acting")
    );
    until_armed(&root).await;
    get(&root, "gg-approve-always").click();
    settle().await;
    assert_eq!(
        get(&root, "gg-tool-step")
            .get_attribute("data-state")
            .as_deref(),
        Some("running")
    );

    dispatch.dispatch(Action::Token {
        text: "Done: added.".into(),
    });
    settle().await;
    get(&root, "gg-stop").click();
    settle().await;
    assert!(by_id(&root, "gg-stop").is_none());
    assert!(by_id(&root, "gg-send").is_some());

    dispatch.dispatch(Action::ShowError {
        error: UiError::new(ErrorKind::DownloadFailed, "net"),
    });
    settle().await;
    let action = all(&root, "[data-testid=gg-error] [data-action=open_settings]");
    action[0].dyn_ref::<HtmlElement>().expect("button").click();
    settle().await;
    assert!(
        by_id(&root, "gg-settings").is_some(),
        "Open settings shows the settings page"
    );
    let thinking: HtmlInputElement = get(&root, "gg-setting-thinking")
        .dyn_into()
        .expect("checkbox");
    thinking.click();
    settle().await;
    get(&root, "gg-settings-close").click();
    settle().await;
    get(&root, "gg-new-chat").click();
    settle().await;
    assert!(all(&root, "[data-testid=gg-message]").is_empty());

    let panel = get(&root, "gg-panel");
    key(&panel, "Escape", false, false);
    settle().await;
    assert!(
        by_id(&root, "gg-panel").is_none(),
        "Escape closes the panel"
    );

    let intents = intents.borrow();
    let kinds: Vec<&str> = intents
        .iter()
        .map(|i| match i {
            UiIntent::Send { .. } => "send",
            UiIntent::Stop => "stop",
            UiIntent::NewChat => "new_chat",
            UiIntent::Approve { .. } => "approve",
            UiIntent::SettingsChanged { .. } => "settings",
            UiIntent::ClearModel { .. } => "clear_model",
            UiIntent::DisableSite { .. } => "disable_site",
            UiIntent::ErrorAction { .. } => "error_action",
            UiIntent::MoveLauncher { .. } => "move",
            UiIntent::PanelToggled { .. } => "panel",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "panel",
            "send",
            "approve",
            "stop",
            "error_action",
            "settings",
            "new_chat",
            "panel"
        ]
    );
    assert_eq!(
        intents[2],
        UiIntent::Approve {
            call_id: "t1".into(),
            decision: ApprovalDecision::AlwaysOnSite
        }
    );
    match &intents[5] {
        UiIntent::SettingsChanged { settings } => {
            assert!(settings.thinking);
            // "Always on this site" recorded a permission for the site in the UI state.
            assert_eq!(settings.site_permissions.len(), 1);
            assert_eq!(settings.site_permissions[0].tool, "run_javascript");
        }
        other => panic!("expected settings, got {other:?}"),
    }
    drop(intents);
    app.destroy();
}

#[wasm_bindgen_test]
async fn hosted_panel_closes_through_the_host_only_when_closable() {
    for closable in [false, true] {
        let (on_intent, intents) = recorder::<UiIntent>();
        let (root, app) = mount::<GemApp>(yew::props!(GemAppProps {
            markdown: MarkdownParser::here(),
            on_intent,
            launcher: false,
            closable,
        }));
        settle().await;
        assert!(by_id(&root, "gg-launcher").is_none());
        let panel = get(&root, "gg-panel");
        assert_eq!(by_id(&root, "gg-close").is_some(), closable);
        key(&panel, "Escape", false, false);
        settle().await;
        // In the iframe the panel closes when the key is released, so that none of the key
        // reaches the page that gets the focus back.
        assert!(intents.borrow().is_empty(), "nothing on keydown");
        key_up(&panel, "Escape");
        settle().await;
        // The host hides the iframe; the panel itself stays (it fills the iframe).
        assert!(by_id(&root, "gg-panel").is_some());
        let expected = if closable {
            vec![UiIntent::PanelToggled { open: false }]
        } else {
            vec![]
        };
        assert_eq!(*intents.borrow(), expected, "Escape (closable: {closable})");
        if closable {
            get(&root, "gg-close").click();
            settle().await;
            assert_eq!(
                intents.borrow().len(),
                2,
                "the close button asks the host too"
            );
        }
        app.destroy();
        root.remove();
    }
}

#[wasm_bindgen_test]
async fn shadow_mount_is_closed_styled_inside_immune_to_page_css_and_unmounts() {
    // Hostile page CSS: hides buttons, recolours and resizes everything, even the host.
    let hostile = document().create_element("style").expect("style");
    hostile.set_text_content(Some(
        "* { color: red !important; font-size: 40px !important; font-family: serif !important; } \
         button { display: none !important; } \
         gemma-gem { display: none !important; opacity: 0 !important; filter: invert(1) !important; transform: scale(0.5) !important; } \
         :root { --gg-fg: lime; --gg-bg: red; } \
         body { line-height: 5 !important; }",
    ));
    document()
        .head()
        .expect("head")
        .append_child(&hostile)
        .expect("append");

    let head = document().head().expect("head");
    let head_before = head.inner_html();
    let body = document().body().expect("body");
    let mount = mount_in_shadow::<GemApp>(
        &body,
        HostLayer::Overlay,
        Theme::Light,
        yew::props!(GemAppProps {
            markdown: MarkdownParser::here()
        }),
    )
    .expect("mounted");
    settle().await;
    let host = mount.host().clone();
    assert_eq!(host.tag_name().to_ascii_lowercase(), "gemma-gem");
    assert!(host.shadow_root().is_none(), "the shadow root is closed");
    assert!(
        document()
            .query_selector("[data-testid=gg-launcher]")
            .ok()
            .flatten()
            .is_none(),
        "the page cannot query the UI"
    );
    let window = web_sys::window().expect("window");
    let host_style = window
        .get_computed_style(&host)
        .ok()
        .flatten()
        .expect("host style");
    assert_eq!(
        host_style.get_property_value("display").ok().as_deref(),
        Some("block")
    );
    assert_eq!(
        host_style.get_property_value("position").ok().as_deref(),
        Some("fixed")
    );
    assert_eq!(
        host_style.get_property_value("z-index").ok().as_deref(),
        Some("2147483647")
    );

    let root = mount.root();
    let launcher = get(root, "gg-launcher");
    let style = window
        .get_computed_style(&launcher)
        .ok()
        .flatten()
        .expect("launcher style");
    assert_eq!(
        style.get_property_value("display").ok().as_deref(),
        Some("block"),
        "page `button` rule leaked in"
    );
    assert_eq!(
        style.get_property_value("color").ok().as_deref(),
        Some("rgb(255, 255, 255)")
    );
    assert_eq!(
        style.get_property_value("width").ok().as_deref(),
        Some("48px")
    );
    let panel_root = root
        .query_selector(".gg-root")
        .ok()
        .flatten()
        .expect("theme root");
    let root_style = window
        .get_computed_style(&panel_root)
        .ok()
        .flatten()
        .expect("root style");
    assert_eq!(
        root_style.get_property_value("font-size").ok().as_deref(),
        Some("14px")
    );

    // Every style of the kit is inside the shadow root (a constructed sheet it adopted: no
    // `<style>` element, which a strict CSP would block), none in the page's <head>.
    assert_eq!(
        root.query_selector_all("style").expect("styles").length(),
        0,
        "a <style> element in the root"
    );
    let sheets = root.adopted_style_sheets();
    assert_eq!(sheets.length(), 1, "the kit's sheet is adopted");
    let rules = js_sys::Reflect::get(&sheets.get(0), &"cssRules".into())
        .and_then(|r| js_sys::Reflect::get(&r, &"length".into()))
        .ok()
        .and_then(|n| n.as_f64())
        .unwrap_or(0.0);
    assert!(
        rules > 50.0,
        "the adopted sheet holds the kit's rules: {rules}"
    );
    assert_eq!(
        head.inner_html(),
        head_before,
        "mounting added styles to the page's <head>"
    );

    mount.unmount();
    assert!(!host.is_connected(), "unmount removes the host");
    hostile.remove();
}

/// A `File` with `bytes`, named `name`, declared as `mime`.
fn file(name: &str, mime: &str, bytes: &[u8]) -> web_sys::File {
    let parts = js_sys::Array::of1(&js_sys::Uint8Array::from(bytes));
    let bag = web_sys::FilePropertyBag::new();
    bag.set_type(mime);
    web_sys::File::new_with_u8_array_sequence_and_options(&parts, name, &bag).expect("file")
}

fn transfer(files: &[web_sys::File]) -> web_sys::DataTransfer {
    let dt = web_sys::DataTransfer::new().expect("DataTransfer");
    for f in files {
        dt.items().add_with_file(f).expect("add file");
    }
    dt
}

/// Waits (up to 2 s) until `n` thumbnails show: files are read asynchronously.
async fn until_attached(root: &Element, n: usize) {
    for _ in 0..100 {
        settle().await;
        if all(root, "[data-testid=gg-attachment]").len() == n {
            return;
        }
        gloo_timers::future::TimeoutFuture::new(20).await;
    }
    panic!(
        "expected {n} attachments, found {}",
        all(root, "[data-testid=gg-attachment]").len()
    );
}

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
const JPEG: &[u8] = &[0xFF, 0xD8, 0xFF, 0xE0, 0, 16, b'J', b'F', b'I', b'F'];

#[wasm_bindgen_test]
async fn pasted_dropped_and_picked_images_are_sent_with_the_text() {
    let (on_send, sent) = recorder::<Outgoing>();
    let mut props = overlay_props(vec![], mock::model_ready(), false);
    props.on_send = on_send;
    let (root, app) = mount::<ChatOverlay>(props);
    settle().await;
    let input: HtmlTextAreaElement = get(&root, "gg-input").dyn_into().expect("textarea");

    // A paste of an image file and a file that only claims to be one.
    let init = web_sys::ClipboardEventInit::new();
    init.set_clipboard_data(Some(&transfer(&[
        file("shot.png", "image/png", PNG),
        file("fake.png", "image/png", b"<svg onload=alert(1)>"),
    ])));
    init.set_bubbles(true);
    init.set_cancelable(true);
    let paste = web_sys::ClipboardEvent::new_with_event_init_dict("paste", &init).expect("paste");
    assert!(
        !input.dispatch_event(&paste).expect("dispatch"),
        "a paste with images is handled"
    );
    until_attached(&root, 1).await;
    let error = get(&root, "gg-attach-error")
        .text_content()
        .unwrap_or_default();
    assert!(
        error.contains("fake.png") && error.contains("PNG, JPEG or WebP"),
        "{error}"
    );

    // With an image attached, Send is enabled even without text.
    let send: web_sys::HtmlButtonElement = get(&root, "gg-send").dyn_into().expect("button");
    assert!(!send.disabled(), "an image alone can be sent");

    // A drop of four more: only three fit (four per message).
    let init = web_sys::DragEventInit::new();
    let many: Vec<_> = (0..4)
        .map(|i| file(&format!("p{i}.jpg"), "image/jpeg", JPEG))
        .collect();
    init.set_data_transfer(Some(&transfer(&many)));
    init.set_bubbles(true);
    init.set_cancelable(true);
    let drop = web_sys::DragEvent::new_with_event_init_dict("drop", &init).expect("drop");
    get(&root, "gg-input")
        .dispatch_event(&drop)
        .expect("dispatch");
    until_attached(&root, 4).await;
    let error = get(&root, "gg-attach-error")
        .text_content()
        .unwrap_or_default();
    assert!(error.contains("at most 4"), "{error}");

    // Remove the second, then pick one with the attach button's file input.
    all(&root, "[data-testid=gg-attachment-remove]")[1]
        .dyn_ref::<HtmlElement>()
        .expect("button")
        .click();
    until_attached(&root, 3).await;
    assert!(
        by_id(&root, "gg-attach-error").is_none(),
        "the error goes with the change"
    );
    let picker: HtmlInputElement = get(&root, "gg-attach-input").dyn_into().expect("input");
    picker.set_files(transfer(&[file("picked.png", "", PNG)]).files().as_ref());
    fire(&picker, "change");
    until_attached(&root, 4).await;

    type_into(&root, "  what is on these?  ").await;
    get(&root, "gg-send").click();
    settle().await;
    let sent = sent.borrow();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].text, "what is on these?");
    let types: Vec<_> = sent[0]
        .images
        .iter()
        .map(|i| i.mime_type.as_str())
        .collect();
    // In order: the pasted PNG, the drop's 2nd and 3rd (the 1st was removed), the picked PNG.
    assert_eq!(
        types,
        ["image/png", "image/jpeg", "image/jpeg", "image/png"]
    );
    assert_eq!(sent[0].images[0].data, PNG);
    assert!(
        all(&root, "[data-testid=gg-attachment]").is_empty(),
        "the attachments are cleared after sending"
    );
    app.destroy();
}

#[wasm_bindgen_test]
async fn a_user_message_shows_its_images() {
    let message = ChatMessage::user_with_images(
        1,
        "look",
        vec![
            ImagePart::png(PNG.to_vec()),
            ImagePart {
                mime_type: "image/svg+xml".into(),
                data: b"<svg/>".to_vec(),
            },
        ],
    );
    let (root, app) = mount::<ChatOverlay>(overlay_props(
        vec![Rc::new(message)],
        mock::model_ready(),
        false,
    ));
    settle().await;
    let images = all(&root, "[data-testid=gg-message-image]");
    assert_eq!(images.len(), 1, "only inline raster types are shown");
    let src = images[0].get_attribute("src").unwrap_or_default();
    assert!(src.starts_with("data:image/png;base64,"), "{src}");
    app.destroy();
}
