//! The embeddable widget's page side (issue 32): `<gemma-gem-widget>` on any page, no extension.
//!
//! The loader `gemma-gem-widget.js` defines the element and creates one [`Widget`] per element.
//! The widget mounts the components' [`GemApp`] (launcher, chat, tool timeline, settings) in a
//! **closed** shadow root of the element with the kit's stylist styles inside it, starts the
//! model worker (`gemma-gem-widget-worker.js`, a module Worker from the same folder) on the first
//! question, runs the page tools the worker asks for in the page itself (confined to `scope`,
//! limited to `tools`), and reports what happens as DOM events on the element (`gg-status`,
//! `gg-token`, `gg-tool`, `gg-answer`, `gg-error`). The page's main thread renders and runs the
//! tools only; the model never runs here, and neither does the Markdown parser: answers are
//! parsed by the worker ([`PageRequest::ParseMarkdown`]) and rendered here from its events.

pub mod attrs;
mod events;
mod link;
mod page;
mod page_content;

use attrs::{Config, ThemeAttr};
use gg_agent::AgentEvent;
use gg_components::{
    Action, ChatDispatcher, ChatMessage, ErrorKind, GemApp, GemAppProps, HostLayer, MarkdownParser,
    ModelChoice, Settings, ShadowApp, ShadowAppProps, Theme, UiError, UiIntent,
    attach_closed_shadow,
};
use gg_messages::widget::{PageMessage, PageRequest, TurnSettings};
use std::cell::RefCell;
use std::rc::{Rc, Weak};
use wasm_bindgen::prelude::*;
use web_sys::HtmlElement;

/// A question `ask()` is waiting on.
struct Waiting {
    turn: u64,
    resolve: js_sys::Function,
    reject: js_sys::Function,
}

struct State {
    element: HtmlElement,
    worker_url: String,
    config: Config,
    /// What the user changed in the settings panel (kept until a setting's attribute changes).
    user_settings: Option<Settings>,
    app: Option<yew::AppHandle<ShadowApp<GemApp>>>,
    /// What the app was rendered with (its theme changes with the attribute).
    props: Option<(stylist::manager::StyleManager, GemAppProps)>,
    dispatcher: Option<ChatDispatcher>,
    link: Option<link::WorkerLink>,
    /// The running turn (its number) and the answer text it produced so far.
    turn: u64,
    running: Option<u64>,
    answer: String,
    waiting: Vec<Waiting>,
    /// WebGPU is missing in the worker: why (every question is answered with it).
    no_webgpu: Option<String>,
    tools: page::PageTools,
    /// Markdown the UI asked the worker to parse and has no answer for: sent when asked if the
    /// worker runs, else when it starts (again, after a removal).
    markdown: Vec<MarkdownAsked>,
    markdown_ids: u64,
}

/// Markdown the UI asked the worker to parse ([`PageRequest::ParseMarkdown`]).
struct MarkdownAsked {
    id: u64,
    source: Rc<str>,
    /// Where its events go.
    answer: yew::Callback<Vec<gg_components::markdown::MdEvent>>,
}

/// One `<gemma-gem-widget>` element.
#[wasm_bindgen]
pub struct Widget {
    state: Rc<RefCell<State>>,
}

fn warn(message: &str) {
    web_sys::console::warn_1(&JsValue::from_str(message));
}

fn model_choice(size: &str) -> ModelChoice {
    if size.eq_ignore_ascii_case("E4B") {
        ModelChoice::E4b
    } else {
        ModelChoice::E2b
    }
}

impl State {
    fn read_config(&mut self) {
        let element = self.element.clone();
        let (config, warnings) = Config::parse(|name| element.get_attribute(name));
        for w in warnings {
            warn(&w.to_string());
        }
        self.tools
            .configure(config.scope.clone(), config.tools.clone());
        self.config = config;
    }

    /// The settings the panel shows: the attributes, with what the user changed on top.
    fn settings(&self) -> Settings {
        if let Some(s) = &self.user_settings {
            return s.clone();
        }
        let c = &self.config;
        Settings {
            model: model_choice(&c.model_size),
            thinking: c.thinking,
            max_iterations: c.max_iterations,
            temperature: c.temperature,
            image_tokens: c.image_tokens,
            constrain_tool_calls: c.constrain_tool_calls,
            ..Settings::default()
        }
    }

    fn theme(&self) -> Theme {
        match self.config.theme {
            ThemeAttr::Auto => Theme::Auto,
            ThemeAttr::Light => Theme::Light,
            ThemeAttr::Dark => Theme::Dark,
        }
    }

    /// The repository of the model: `model-source` resolved against the page's URL (so
    /// `models/x` works), or the pinned Hugging Face repository of `size` when there is none.
    /// Development builds also take `script:URL` (the scripted model of the tests).
    fn repository(&self, size: &str) -> String {
        let source = self.config.model_source.trim();
        let base = web_sys::window()
            .and_then(|w| w.document())
            .and_then(|d| d.base_uri().ok().flatten())
            .unwrap_or_default();
        let absolute = |url: &str| {
            web_sys::Url::new_with_base(url, &base)
                .map(|u| u.href())
                .unwrap_or_else(|_| url.to_owned())
        };
        if let Some(script) = source.strip_prefix("script:") {
            return format!("script:{}", absolute(script));
        }
        let source = if source.is_empty() {
            String::new()
        } else {
            absolute(source)
        };
        gg_messages::model_repository(&source, size)
    }

    fn turn_settings(&self) -> TurnSettings {
        let s = self.settings();
        let size = match s.model {
            ModelChoice::E4b => "E4B",
            ModelChoice::E2b => "E2B",
        };
        TurnSettings {
            repository: self.repository(size),
            model_size: size.to_owned(),
            thinking: s.thinking,
            max_iterations: s.max_iterations,
            temperature: s.temperature,
            image_tokens: s.image_tokens,
            constrain_tool_calls: s.constrain_tool_calls,
            system_prompt: self.config.system_prompt.clone(),
            tools: self.config.tool_names(),
        }
    }
}

/// Dispatches into the UI (outside any borrow of the state: the UI may call back).
fn dispatch(state: &Rc<RefCell<State>>, actions: impl IntoIterator<Item = Action>) {
    let d = state.borrow().dispatcher.clone();
    if let Some(d) = d {
        for a in actions {
            d.dispatch(a);
        }
    }
}

#[wasm_bindgen]
impl Widget {
    /// Called by the loader for each element (before its attributes are reported).
    #[wasm_bindgen(constructor)]
    pub fn new(element: HtmlElement, worker_url: String) -> Widget {
        let state = Rc::new(RefCell::new(State {
            element,
            worker_url,
            config: Config::default(),
            user_settings: None,
            app: None,
            props: None,
            dispatcher: None,
            link: None,
            turn: 0,
            running: None,
            answer: String::new(),
            waiting: Vec::new(),
            no_webgpu: None,
            tools: page::PageTools::new(),
            markdown: Vec::new(),
            markdown_ids: 0,
        }));
        state.borrow_mut().read_config();
        Widget { state }
    }

    /// The element was put into a document: mount the UI (once; a moved element keeps it).
    pub fn connected(&self) {
        if self.state.borrow().app.is_some() {
            return;
        }
        if let Err(e) = mount(&self.state) {
            let message = format!("<gemma-gem-widget>: could not mount: {e:?}");
            web_sys::console::error_1(&message.clone().into());
            events::error(&self.state.borrow().element, "mount_failed", &message);
        }
    }

    /// The element left the document. When it does not come back in this task (a move), the
    /// worker ends (which frees the model's GPU memory), a running question fails, and the
    /// conversation is cleared (the worker that knew it is gone). The UI stays mounted in the
    /// element's closed root (a root cannot be attached twice): put back, the element shows an
    /// empty conversation and starts a new worker on the next question.
    pub fn disconnected(&self) {
        let weak = Rc::downgrade(&self.state);
        gloo_timers::callback::Timeout::new(0, move || {
            let Some(state) = weak.upgrade() else { return };
            if state.borrow().element.is_connected() {
                return;
            }
            let link = {
                let mut s = state.borrow_mut();
                s.no_webgpu = None;
                s.link.take()
            };
            if let Some(link) = link {
                link.terminate();
            }
            fail_waiting(&state, "the widget was removed from the page");
            state.borrow_mut().running = None;
            dispatch(&state, [Action::Stop, Action::NewChat]);
            greet(&state);
        })
        .forget();
    }

    /// An observed attribute changed: the whole configuration is read again and shown.
    pub fn attribute_changed(&self, name: String) {
        {
            let mut s = self.state.borrow_mut();
            s.read_config();
            if name != "open" && name != "corner" && name != "theme" {
                // An attribute that sets a setting wins over the panel's value.
                s.user_settings = None;
            }
        }
        self.render();
        let (open, corner, settings) = {
            let s = self.state.borrow();
            (s.config.open, s.config.corner, s.settings())
        };
        dispatch(
            &self.state,
            [
                Action::SetSettings { settings },
                Action::SetPanelOpen { open },
                Action::MoveLauncher { corner },
            ],
        );
    }

    /// `element.ask(text)`: sends `text` as the user would; resolves with the answer's text
    /// when the turn ends, rejects when it fails.
    pub fn ask(&self, text: String) -> js_sys::Promise {
        let state = self.state.clone();
        js_sys::Promise::new(&mut |resolve, reject| {
            if text.trim().is_empty() {
                let _ = reject.call1(
                    &JsValue::NULL,
                    &js_sys::Error::new("ask(text): the text is empty").into(),
                );
                return;
            }
            if state.borrow().running.is_some() {
                let _ = reject.call1(
                    &JsValue::NULL,
                    &js_sys::Error::new("ask(text): an answer is running; call stop() first")
                        .into(),
                );
                return;
            }
            dispatch(
                &state,
                [Action::UserSent {
                    text: text.clone(),
                    images: Vec::new(),
                }],
            );
            let turn = send_question(&state, text.clone(), Vec::new());
            state.borrow_mut().waiting.push(Waiting {
                turn,
                resolve,
                reject,
            });
            fail_without_webgpu(&state, turn);
        })
    }

    /// `element.stop()`: stops the running answer.
    pub fn stop(&self) {
        dispatch(&self.state, [Action::Stop]);
        on_intent(&self.state, UiIntent::Stop);
    }

    /// `element.clear()`: forgets the conversation.
    pub fn clear(&self) {
        dispatch(&self.state, [Action::NewChat]);
        on_intent(&self.state, UiIntent::NewChat);
        greet(&self.state);
    }
}

impl Widget {
    /// Shows a changed theme (the rest of the configuration is state, dispatched).
    fn render(&self) {
        let mut s = self.state.borrow_mut();
        let theme = s.theme();
        let Some((styles, inner)) = s.props.clone() else {
            return;
        };
        if let Some(app) = s.app.as_mut() {
            app.update(ShadowAppProps {
                styles,
                theme,
                inner,
            });
        }
    }
}

/// Shows the greeting as the conversation's first answer (not sent to the model).
fn greet(state: &Rc<RefCell<State>>) {
    let greeting = state.borrow().config.greeting.clone();
    if let Some(text) = greeting {
        dispatch(
            state,
            [Action::LoadConversation {
                messages: vec![ChatMessage::assistant(1, text)],
            }],
        );
    }
}

fn mount(state: &Rc<RefCell<State>>) -> Result<(), JsValue> {
    let (element, theme, initial) = {
        let s = state.borrow();
        let mut initial = gg_components::ChatState {
            settings: s.settings(),
            corner: s.config.corner,
            panel_open: s.config.open,
            ..Default::default()
        };
        if let Some(text) = &s.config.greeting {
            initial.messages = vec![Rc::new(ChatMessage::assistant(1, text.clone()))];
            initial.next_id = 2;
        }
        (s.element.clone(), s.theme(), initial)
    };
    // Through the CSSOM: a strict CSP (no `style-src 'unsafe-inline'`) drops style attributes.
    element
        .style()
        .set_css_text(HostLayer::Overlay.host_style());
    let parts = attach_closed_shadow(&element)?;
    let weak = Rc::downgrade(state);
    let on_ready = {
        let weak = weak.clone();
        yew::Callback::from(move |d: ChatDispatcher| {
            if let Some(state) = weak.upgrade() {
                state.borrow_mut().dispatcher = Some(d);
            }
        })
    };
    let on_intent = yew::Callback::from(move |intent: UiIntent| {
        if let Some(state) = weak.upgrade() {
            // Out of the UI's own event handler: the state may dispatch back into it.
            wasm_bindgen_futures::spawn_local(async move { on_intent(&state, intent) });
        }
    });
    let markdown = {
        let weak = Rc::downgrade(state);
        MarkdownParser::Elsewhere(yew::Callback::from(
            move |(source, answer): (Rc<str>, yew::Callback<_>)| {
                if let Some(state) = weak.upgrade() {
                    parse_markdown(&state, source, answer);
                }
            },
        ))
    };
    let inner = GemAppProps {
        markdown,
        initial: Some(Rc::new(initial)),
        on_intent,
        on_ready,
        launcher: true,
        closable: false,
        images: true,
    };
    let app = yew::Renderer::<ShadowApp<GemApp>>::with_root_and_props(
        parts.mount_point,
        ShadowAppProps {
            styles: parts.styles.clone(),
            theme,
            inner: inner.clone(),
        },
    )
    .render();
    let mut s = state.borrow_mut();
    s.app = Some(app);
    s.props = Some((parts.styles, inner));
    Ok(())
}

/// The worker, started on first use.
fn link(state: &Rc<RefCell<State>>) -> Result<link::WorkerLink, String> {
    if let Some(l) = state.borrow().link.clone() {
        return Ok(l);
    }
    let url = state.borrow().worker_url.clone();
    let weak = Rc::downgrade(state);
    let link = link::WorkerLink::start(&url, move |message| {
        if let Some(state) = weak.upgrade() {
            on_worker_message(&state, message);
        }
    })?;
    state.borrow_mut().link = Some(link.clone());
    // Markdown asked for while no worker ran (a greeting) or of a worker that ended.
    let waiting: Vec<(u64, Rc<str>)> = state
        .borrow()
        .markdown
        .iter()
        .map(|asked| (asked.id, Rc::clone(&asked.source)))
        .collect();
    for (id, source) in waiting {
        link.post(&PageRequest::ParseMarkdown {
            id,
            text: source.to_string(),
        });
    }
    Ok(link)
}

/// The UI asks for the events of `source`: the worker parses it (never started for this alone:
/// the question waits for the worker the panel or a question starts).
fn parse_markdown(
    state: &Rc<RefCell<State>>,
    source: Rc<str>,
    answer: yew::Callback<Vec<gg_components::markdown::MdEvent>>,
) {
    let (id, link) = {
        let mut s = state.borrow_mut();
        s.markdown_ids += 1;
        let id = s.markdown_ids;
        s.markdown.push(MarkdownAsked {
            id,
            source: Rc::clone(&source),
            answer,
        });
        (id, s.link.clone())
    };
    if let Some(link) = link {
        link.post(&PageRequest::ParseMarkdown {
            id,
            text: source.to_string(),
        });
    }
}

fn post(state: &Rc<RefCell<State>>, request: PageRequest) {
    match link(state) {
        Ok(l) => l.post(&request),
        Err(e) => {
            let message = format!("could not start the model worker: {e}");
            show_error(state, ErrorKind::ModelLoadFailed, &message);
            let turn = state.borrow().running;
            if let Some(turn) = turn {
                finish_turn(state, turn, Err(message));
            }
        }
    }
}

fn show_error(state: &Rc<RefCell<State>>, kind: ErrorKind, message: &str) {
    dispatch(
        state,
        [Action::ShowError {
            error: UiError::new(kind, message.to_owned()),
        }],
    );
    events::error(&state.borrow().element, kind_name(kind), message);
}

fn kind_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::WebGpuUnavailable => "webgpu_unavailable",
        ErrorKind::DownloadFailed => "download_failed",
        ErrorKind::OutOfMemory => "out_of_space",
        ErrorKind::ModelLoadFailed => "load_failed",
        _ => "generation_failed",
    }
}

/// Starts a turn with `text`; returns its number.
fn send_question(
    state: &Rc<RefCell<State>>,
    text: String,
    images: Vec<gg_agent::ImagePart>,
) -> u64 {
    let (turn, settings) = {
        let mut s = state.borrow_mut();
        s.turn += 1;
        s.running = Some(s.turn);
        s.answer.clear();
        (s.turn, s.turn_settings())
    };
    post(
        state,
        PageRequest::Ask {
            turn,
            text,
            images,
            settings,
        },
    );
    turn
}

/// Ends the question `turn` at once when the worker said it has no WebGPU (the worker refuses
/// it too, later; the page need not wait for that).
fn fail_without_webgpu(state: &Rc<RefCell<State>>, turn: u64) {
    let no_webgpu = state.borrow().no_webgpu.clone();
    if let Some(reason) = no_webgpu {
        finish_turn(state, turn, Err(reason));
    }
}

fn on_intent(state: &Rc<RefCell<State>>, intent: UiIntent) {
    match intent {
        UiIntent::Send { text, images } => {
            let images = images
                .into_iter()
                .map(|i| gg_agent::ImagePart {
                    mime_type: i.mime_type,
                    data: i.data,
                })
                .collect();
            let turn = send_question(state, text, images);
            fail_without_webgpu(state, turn);
        }
        UiIntent::Stop => {
            if state.borrow().link.is_some() {
                post(state, PageRequest::Stop);
            }
        }
        UiIntent::NewChat => {
            if state.borrow().link.is_some() {
                post(state, PageRequest::Clear);
            }
            let turn = state.borrow_mut().running.take();
            if let Some(turn) = turn {
                finish_turn(state, turn, Err("the conversation was cleared".into()));
            }
        }
        UiIntent::Approve { call_id, decision } => {
            post(state, PageRequest::Approval { call_id, decision });
        }
        UiIntent::SettingsChanged { settings } => {
            state.borrow_mut().user_settings = Some(settings.clone());
            dispatch(state, [Action::SetSettings { settings }]);
        }
        UiIntent::MoveLauncher { corner } => {
            let element = state.borrow().element.clone();
            let _ = element.set_attribute("corner", corner.name());
        }
        UiIntent::PanelToggled { open } => {
            let element = state.borrow().element.clone();
            let _ = if open {
                element.set_attribute("open", "")
            } else {
                element.remove_attribute("open")
            };
        }
        UiIntent::ErrorAction { action, .. } => {
            if action == gg_components::ErrorAction::ReloadPage
                && let Some(w) = web_sys::window()
            {
                let _ = w.location().reload();
            }
        }
        // The site's owner decides where the widget is, and the model files are the site's.
        UiIntent::ClearModel { .. } | UiIntent::DisableSite { .. } => {}
    }
}

/// How a turn ended: its final answer and why it ended (`StopReason`'s JSON), or an error.
type TurnEnd = Result<(String, serde_json::Value), String>;

/// Ends the turn `turn` for `ask()` and the `gg-answer` / `gg-error` events.
fn finish_turn(state: &Rc<RefCell<State>>, turn: u64, result: TurnEnd) {
    let (element, waiting) = {
        let mut s = state.borrow_mut();
        if s.running == Some(turn) {
            s.running = None;
        }
        let (mine, rest): (Vec<_>, Vec<_>) = s.waiting.drain(..).partition(|w| w.turn == turn);
        s.waiting = rest;
        (s.element.clone(), mine)
    };
    match &result {
        Ok((text, reason)) => events::answer(&element, turn, text, reason),
        Err(message) => events::error(&element, "turn_failed", message),
    }
    for w in waiting {
        let _ = match &result {
            Ok((text, _)) => w.resolve.call1(&JsValue::NULL, &JsValue::from_str(text)),
            Err(message) => w
                .reject
                .call1(&JsValue::NULL, &js_sys::Error::new(message).into()),
        };
    }
}

fn fail_waiting(state: &Rc<RefCell<State>>, message: &str) {
    let turns: Vec<u64> = state.borrow().waiting.iter().map(|w| w.turn).collect();
    for turn in turns {
        finish_turn(state, turn, Err(message.to_owned()));
    }
}

/// Posts the page tools' answer to the worker's request `id` when it comes (as the tools give it:
/// the page never parses it).
fn answer_later(
    state: &Rc<RefCell<State>>,
    kind: &'static str,
    id: u64,
    job: futures::future::LocalBoxFuture<'static, JsValue>,
) {
    let weak: Weak<RefCell<State>> = Rc::downgrade(state);
    wasm_bindgen_futures::spawn_local(async move {
        let result = job.await;
        // A worker that ended (the element was removed) waits for nothing.
        let link = weak.upgrade().and_then(|state| state.borrow().link.clone());
        if let Some(link) = link {
            link.post_answer(kind, id, &result);
        }
    });
}

fn on_worker_message(state: &Rc<RefCell<State>>, message: PageMessage) {
    use gg_messages::widget::WorkerMessage;
    match message {
        WorkerMessage::Started { adapter } => {
            if adapter.adapter.is_none() {
                let reason = format!(
                    "WebGPU is not available in this browser ({}). Gemma Gem needs WebGPU: use a \
                     recent Chrome or Edge, and check that hardware acceleration is on \
                     (chrome://settings/system) and that chrome://gpu lists WebGPU as enabled.",
                    adapter.error.clone().unwrap_or_else(|| "no adapter".into())
                );
                state.borrow_mut().no_webgpu = Some(reason.clone());
                show_error(state, ErrorKind::WebGpuUnavailable, &reason);
                let turn = state.borrow().running;
                if let Some(turn) = turn {
                    finish_turn(state, turn, Err(reason));
                }
            }
        }
        WorkerMessage::ModelStatus(report) => {
            events::status(&state.borrow().element, &report);
            if let gg_messages::ModelState::Failed { message, .. } = &report.state {
                events::error(&state.borrow().element, "model_failed", message);
            }
            dispatch(state, gg_ui_bridge::model_actions(report, None));
        }
        WorkerMessage::Agent { turn, event } => on_agent_event(state, turn, event),
        WorkerMessage::RunTool { id, call } => {
            let job = state.borrow().tools.run(call);
            answer_later(state, "tool_result", id, job);
        }
        WorkerMessage::DescribeElement { id, target } => {
            let job = state.borrow().tools.describe(target);
            answer_later(state, "element_facts", id, job);
        }
        WorkerMessage::Error { message } => {
            show_error(state, ErrorKind::GenerationFailed, &message);
        }
        WorkerMessage::Markdown { id, events } => {
            let asked = {
                let mut s = state.borrow_mut();
                let at = s.markdown.iter().position(|asked| asked.id == id);
                at.map(|at| s.markdown.remove(at))
            };
            if let Some(asked) = asked {
                asked.answer.emit(events);
            }
        }
    }
}

fn on_agent_event(state: &Rc<RefCell<State>>, turn: u64, event: AgentEvent) {
    if state.borrow().running != Some(turn) {
        // A turn that was stopped or cleared: its late events change nothing.
        return;
    }
    let element = state.borrow().element.clone();
    events::agent(&element, turn, &event);
    match &event {
        AgentEvent::Token { text } => state.borrow_mut().answer.push_str(text),
        // A tool call starts a new stretch of answer text; `gg-answer` carries the last one.
        AgentEvent::ToolStart { .. } => state.borrow_mut().answer.clear(),
        _ => {}
    }
    // Every end of a turn is an answer (cut, stopped or complete: `reason` says which); only an
    // error is a failure.
    let end = match &event {
        AgentEvent::Done { reason } => Some(Ok((
            state.borrow().answer.clone(),
            serde_json::to_value(reason).unwrap_or_default(),
        ))),
        AgentEvent::Error { error } => Some(Err(error.to_string())),
        _ => None,
    };
    dispatch(state, gg_ui_bridge::event_actions(event));
    if let Some(result) = end {
        finish_turn(state, turn, result);
    }
}
