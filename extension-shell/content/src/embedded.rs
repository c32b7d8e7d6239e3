//! The page tools as a library (feature `embedded`): the embeddable widget runs the content
//! script's own tools on the page it is embedded in, confined to a scope and an allow-list.
//!
//! ```no_run
//! # use gg_content::embedded::PageTools;
//! # use wasm_bindgen::JsValue;
//! let tools = PageTools::new(None, &gg_vocab::READ_TOOLS);
//! let call: JsValue = js_sys::JSON::parse(r#"{"name": "snapshot_page", "args": {}}"#).unwrap();
//! let outcome: js_sys::Promise = tools.run(&call);
//! // resolves to {"Ok": {"value": {...}}} or {"Err": {"kind": "...", "message": "..."}}
//! ```
//!
//! - [`PageTools::run`] takes the call the service worker sends the content script today
//!   (`ExecuteTool`'s `call`: `{"name": ..., "args": {...}}`, the serde form of
//!   `gg_agent::ToolCall`) and resolves to the outcome the content script answers with (the
//!   serde form of `Result<gg_agent::ToolOutput, gg_agent::ToolError>`).
//! - [`PageTools::describe`] takes the gate's target (`{"ref": "e3"}` or `{"selector": ...}`,
//!   `gg_agent::ElementTarget`) and resolves to `Result<gg_agent::ElementFacts,
//!   gg_agent::ToolError>` in serde form.
//! - [`PageTools::run_value`] / [`PageTools::describe_value`]: the same as Rust futures that use
//!   no JavaScript `Promise` (a page may replace it); the widget posts their answers to its worker
//!   as they are. Typed: [`PageTools::call`] (`gg_agent::ToolCall` -> `Result<ToolOutput,
//!   ToolError>`) and [`PageTools::element_facts`] (`ElementTarget` -> `Result<ElementFacts,
//!   ToolError>`), through `serde-wasm-bindgen`.
//! - Calls run in slices of at most [`SLICE_MS`] ms, scheduled here (a `MessageChannel` task
//!   between slices, a call's first slice after the page's next rendering update, like the
//!   content script's loader), so the page's main thread keeps running between them. Calls run
//!   one after the other, in order. Refs (`e12`) and the last read's text are kept between
//!   calls, per `PageTools`.
//! - **Scope**: with a scope element, `snapshot_page` and `read_page_content` walk only its
//!   subtree (the scope's element included; the title and URL are still the page's); selectors
//!   and refs resolve only to elements inside it, and one that names an element outside fails
//!   with `not_found` saying so; `click_element`, `type_text` and `scroll_page {ref}` never act
//!   outside. `scroll_page {direction}` scrolls the page itself (a view change, not the page's
//!   data); when the window cannot scroll that way, only a scrollable box inside the scope (or
//!   the scope's element) is scrolled. The widget's element (`<gemma-gem-widget>`) and
//!   anything in it are never listed, read or acted on, scope or not.
//! - **Allow-list**: a call of a tool the page does not allow fails with kind `blocked` ("the
//!   page does not allow it"), naming the tool and the tools the page allows. The levels
//!   (`read`, `act`) are [`gg_vocab::tools_for_level`] / [`gg_vocab::split_tool_list`].
//!   `take_screenshot` and `run_javascript` are not in-page tools: `run` answers them
//!   `unavailable` even when allowed (the widget runs them itself, if at all).
//! - Nothing here panics on odd input: every field is read defensively, and a call made while
//!   another call of the same `PageTools` is on the stack (a page's event handler calling back
//!   in during a click) fails with `unavailable` instead of re-entering.
//! - The tools run in the page's realm, not in an isolated world as in the extension: the
//!   selector queries use methods from a fresh realm (`pristine.rs`) and argument lists
//!   are built without `Array.prototype.push`, so a page that replaced
//!   `Element.prototype.querySelector` or `Array.prototype.push` does not break them.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};

use gg_vocab::{Tool, ToolErrorKind};
use wasm_bindgen::prelude::*;
use web_sys::Element;

use crate::js::{self, Obj};
use crate::scope::Scope;
pub use crate::slices::SLICE_MS;
use crate::slices::{Work, now};
use crate::text::clip;
use crate::tools::{self, Begun, ToolErr};

/// The page tools of one widget. See the module docs.
pub struct PageTools {
    inner: Rc<RefCell<Inner>>,
}

struct Inner {
    state: tools::State,
    allowed: Vec<Tool>,
    jobs: VecDeque<Pending>,
    /// A slice is scheduled (a message posted, or a frame awaited).
    scheduled: bool,
    /// A frame is awaited: the first of `requestAnimationFrame` and a 100 ms timer posts.
    awaiting_frame: bool,
    /// `port1` runs the pump; posting on `port2` schedules it.
    port1: JsValue,
    port2: JsValue,
    /// Called by `requestAnimationFrame` and the timer.
    on_frame: JsValue,
}

struct Pending {
    work: Work,
    reply: Reply,
    /// The answer wraps the value as `{value}` (a tool's output) or not (element facts).
    wrap: bool,
}

/// A frame that never comes (a hidden tab renders none) is waited for this long at most.
const FRAME_WAIT_MS: i32 = 100;

impl PageTools {
    /// Page tools confined to `scope` (the whole page when `None`) that run only the tools in
    /// `allowed` (the page's `tools` attribute, parsed with [`gg_vocab::split_tool_list`]).
    pub fn new(scope: Option<Element>, allowed: &[Tool]) -> Self {
        crate::pristine::prepare();
        let inner = Rc::new(RefCell::new(Inner {
            state: tools::State::within(Scope::within(scope)),
            allowed: allowed.to_vec(),
            jobs: VecDeque::new(),
            scheduled: false,
            awaiting_frame: false,
            port1: JsValue::UNDEFINED,
            port2: JsValue::UNDEFINED,
            on_frame: JsValue::UNDEFINED,
        }));
        let weak = Rc::downgrade(&inner);
        let channel = js::construct("MessageChannel", &[]).unwrap_or(JsValue::UNDEFINED);
        let (port1, port2) = (js::get(&channel, "port1"), js::get(&channel, "port2"));
        let pump_fn = {
            let (weak, port2) = (weak.clone(), port2.clone());
            Closure::<dyn FnMut()>::new(move || pump(&weak, &port2)).into_js_value()
        };
        let on_frame = {
            let port2 = port2.clone();
            Closure::<dyn FnMut()>::new(move || frame_came(&weak, &port2)).into_js_value()
        };
        let _ = js_sys::Reflect::set(&port1, &JsValue::from_str("onmessage"), &pump_fn);
        if let Ok(mut s) = inner.try_borrow_mut() {
            s.port1 = port1;
            s.port2 = port2;
            s.on_frame = on_frame;
        }
        Self { inner }
    }

    /// The tools this page allows.
    pub fn allowed(&self) -> Vec<Tool> {
        self.inner
            .try_borrow()
            .map(|s| s.allowed.clone())
            .unwrap_or_default()
    }

    /// Allows other tools from now on (the page changed the widget's `tools` attribute); calls
    /// already running finish.
    pub fn set_allowed(&self, allowed: &[Tool]) {
        if let Ok(mut s) = self.inner.try_borrow_mut() {
            s.allowed = allowed.to_vec();
        }
    }

    /// Confines the tools to another scope from the next call on (the page changed the
    /// widget's `scope` attribute, or replaced the scope's element). Refs stay, but those
    /// outside the new scope are refused.
    pub fn set_scope(&self, scope: Option<Element>) {
        if let Ok(mut s) = self.inner.try_borrow_mut() {
            s.state.set_scope(Scope::within(scope));
        }
    }

    /// Runs one tool call (`{"name": ..., "args": {...}}`); resolves to `{"Ok": {"value": V}}`
    /// or `{"Err": {"kind": K, "message": M}}`. Never rejects.
    pub fn run(&self, call: &JsValue) -> js_sys::Promise {
        let (promise, resolve) = promise();
        self.settle(self.begin_call(call), Reply::Resolve(resolve), true);
        promise
    }

    /// [`PageTools::run`] as a Rust future (no JavaScript `Promise`, which a page may replace).
    pub fn run_value(&self, call: &JsValue) -> Answer {
        let slot = Rc::new(Slot::default());
        self.settle(self.begin_call(call), Reply::Slot(slot.clone()), true);
        Answer(slot)
    }

    /// The gate's facts about an element (`{"ref": "e3"}` or `{"selector": "..."}`); resolves
    /// to `{"Ok": facts}` or `{"Err": {"kind": K, "message": M}}`. Never a field's value.
    /// Scope applies; the allow-list does not (facts change nothing). Never rejects.
    pub fn describe(&self, target: &JsValue) -> js_sys::Promise {
        let (promise, resolve) = promise();
        self.settle(self.begin_facts(target), Reply::Resolve(resolve), false);
        promise
    }

    /// [`PageTools::describe`] as a Rust future.
    pub fn describe_value(&self, target: &JsValue) -> Answer {
        let slot = Rc::new(Slot::default());
        self.settle(self.begin_facts(target), Reply::Slot(slot.clone()), false);
        Answer(slot)
    }

    /// Runs a typed call (`gg_messages::widget::WorkerMessage::RunTool`'s): the answer of
    /// `WidgetRequest::ToolResult`.
    pub async fn call(
        &self,
        call: &gg_agent::ToolCall,
    ) -> Result<gg_agent::ToolOutput, gg_agent::ToolError> {
        let call = match to_js(call) {
            Ok(call) => call,
            Err(e) => return Err(gg_agent::ToolError::new(ToolErrorKind::MalformedCall, e)),
        };
        from_js(self.run_value(&call).await)
    }

    /// The gate's facts about a typed target (`WorkerMessage::DescribeElement`'s): the answer
    /// of `WidgetRequest::ElementFacts`.
    pub async fn element_facts(
        &self,
        target: &gg_agent::ElementTarget,
    ) -> Result<gg_agent::ElementFacts, gg_agent::ToolError> {
        let target = match to_js(target) {
            Ok(target) => target,
            Err(e) => return Err(gg_agent::ToolError::new(ToolErrorKind::MalformedCall, e)),
        };
        from_js(self.describe_value(&target).await)
    }

    fn begin_facts(&self, target: &JsValue) -> Result<Begun, ToolErr> {
        match self.inner.try_borrow_mut() {
            Ok(mut s) => match scope_gone(&s.state) {
                Some(e) => Err(e),
                None => s.state.begin_facts(target),
            },
            Err(_) => Err(busy()),
        }
    }

    fn begin_call(&self, call: &JsValue) -> Result<Begun, ToolErr> {
        let Some(name) = js::get_str(call, "name") else {
            return Err(ToolErr {
                kind: ToolErrorKind::MalformedCall,
                message: String::from("a tool call is {\"name\": ..., \"args\": {...}}"),
            });
        };
        let args = js::get(call, "args");
        let args = if args.is_object() {
            args
        } else {
            js_sys::Object::new().into()
        };
        let Ok(mut s) = self.inner.try_borrow_mut() else {
            return Err(busy());
        };
        if let Some(tool) = Tool::from_name(&name) {
            if !s.allowed.contains(&tool) {
                return Err(not_allowed(tool, &s.allowed));
            }
            if matches!(tool, Tool::TakeScreenshot | Tool::RunJavascript) {
                return Err(ToolErr::unavailable(format!(
                    "{} is not one of the in-page tools; the page tools run {}",
                    tool.name(),
                    names(&gg_vocab::ACT_TOOLS)
                )));
            }
        }
        if let Some(e) = scope_gone(&s.state) {
            return Err(e);
        }
        s.state.begin(&name, &args)
    }

    /// Resolves at once, or queues the work and schedules its first slice.
    fn settle(&self, started: Result<Begun, ToolErr>, reply: Reply, wrap: bool) {
        match started {
            Ok(Begun::Done(value)) => answer(&reply, Ok(value), wrap),
            Err(e) => answer(&reply, Err(e), wrap),
            Ok(Begun::Work(work)) => match self.inner.try_borrow_mut() {
                Ok(mut s) => {
                    s.jobs.push_back(Pending { work, reply, wrap });
                    s.schedule(true);
                }
                Err(_) => answer(&reply, Err(busy()), wrap),
            },
        }
    }
}

impl Drop for PageTools {
    /// Stops the slices; calls still running resolve with a `failed` error.
    fn drop(&mut self) {
        let jobs = match self.inner.try_borrow_mut() {
            Ok(mut s) => {
                let _ =
                    js_sys::Reflect::set(&s.port1, &JsValue::from_str("onmessage"), &JsValue::NULL);
                let _ = js::call(&s.port1, "close", &[]);
                core::mem::take(&mut s.jobs)
            }
            Err(_) => VecDeque::new(),
        };
        for job in jobs {
            let e = ToolErr::failed("the page tools were stopped (the widget was removed)");
            answer(&job.reply, Err(e), job.wrap);
        }
    }
}

impl Inner {
    /// Schedules the pump: after the next rendering update (`frame`) or in the next task.
    fn schedule(&mut self, frame: bool) {
        if self.scheduled || self.jobs.is_empty() {
            return;
        }
        self.scheduled = true;
        if frame {
            self.awaiting_frame = true;
            let global = js_sys::global();
            let f = self.on_frame.clone();
            if js::call(&global, "requestAnimationFrame", core::slice::from_ref(&f)).is_err() {
                self.post();
                return;
            }
            let _ = js::call(&global, "setTimeout", &[f, JsValue::from(FRAME_WAIT_MS)]);
        } else {
            self.post();
        }
    }

    fn post(&mut self) {
        self.awaiting_frame = false;
        if js::call(&self.port2, "postMessage", &[JsValue::from(0)]).is_err() {
            // No MessageChannel: a timer (clamped to 4 ms when nested, still a later task).
            let global = js_sys::global();
            let pump = js::get(&self.port1, "onmessage");
            if js::call(&global, "setTimeout", &[pump, JsValue::from(0)]).is_err() {
                self.scheduled = false;
                crate::log_error("could not schedule the page tools' work");
            }
        }
    }
}

/// `requestAnimationFrame` or the timer, whichever comes first.
fn frame_came(inner: &Weak<RefCell<Inner>>, port2: &JsValue) {
    let Some(inner) = inner.upgrade() else { return };
    match inner.try_borrow_mut() {
        Ok(mut s) => {
            if s.awaiting_frame {
                s.post();
            }
        }
        // Called back from inside a call (never expected): the pump runs in a later task.
        Err(_) => repost(port2),
    }
}

/// Runs the pump in a later task, without the state (it is borrowed).
fn repost(port2: &JsValue) {
    if js::call(port2, "postMessage", &[JsValue::from(0)]).is_err() {
        crate::log_error("could not schedule the page tools' work");
    }
}

/// Runs queued calls for one slice, answers those that finish, and schedules the rest.
fn pump(inner: &Weak<RefCell<Inner>>, port2: &JsValue) {
    let Some(inner) = inner.upgrade() else { return };
    let mut finished = Vec::new();
    {
        let Ok(mut s) = inner.try_borrow_mut() else {
            // Called back from inside a call (never expected): again in a later task.
            repost(port2);
            return;
        };
        s.scheduled = false;
        let until = now() + SLICE_MS;
        while let Some(mut job) = s.jobs.pop_front() {
            match job.work.step(&mut s.state, until) {
                Some(result) => finished.push((job, result)),
                None => {
                    s.jobs.push_front(job);
                    break;
                }
            }
            if now() >= until {
                break;
            }
        }
        let frame = s.jobs.front().is_some_and(|j| j.work.wants_frame());
        s.schedule(frame);
    }
    for (job, result) in finished {
        answer(&job.reply, result, job.wrap);
    }
}

/// A promise and its `resolve`.
fn promise() -> (js_sys::Promise, js_sys::Function) {
    let mut slot = None;
    let promise = js_sys::Promise::new(&mut |resolve, _reject| slot = Some(resolve));
    // The executor runs at once; a `resolve` that does nothing if it somehow did not.
    let resolve = slot.unwrap_or_else(|| js_sys::Function::from(JsValue::UNDEFINED));
    (promise, resolve)
}

/// Where a call's answer goes.
enum Reply {
    /// A JavaScript promise's `resolve`.
    Resolve(js_sys::Function),
    /// A Rust future ([`Answer`]).
    Slot(Rc<Slot>),
}

/// An answer for an [`Answer`] future.
#[derive(Default)]
struct Slot {
    value: RefCell<Option<JsValue>>,
    waker: RefCell<Option<Waker>>,
}

/// The answer of [`PageTools::run_value`] / [`PageTools::describe_value`]: `{"Ok": ...}` or
/// `{"Err": ...}`, as the promises resolve to.
pub struct Answer(Rc<Slot>);

impl Future for Answer {
    type Output = JsValue;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<JsValue> {
        match self.0.value.borrow_mut().take() {
            Some(value) => Poll::Ready(value),
            None => {
                *self.0.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Answers with `{"Ok": ...}` / `{"Err": ...}` (the content script's wire form).
fn answer(reply: &Reply, result: Result<JsValue, ToolErr>, wrap: bool) {
    let body = match result {
        Ok(v) if wrap => Obj::new().v("Ok", Obj::new().v("value", v).js()),
        Ok(v) => Obj::new().v("Ok", v),
        Err(e) => Obj::new().v("Err", e.to_js()),
    };
    match reply {
        Reply::Resolve(resolve) => {
            if resolve.call1(&JsValue::UNDEFINED, &body.js()).is_err() {
                crate::log_error("could not answer a page tool call");
            }
        }
        Reply::Slot(slot) => {
            *slot.value.borrow_mut() = Some(body.js());
            if let Some(waker) = slot.waker.borrow_mut().take() {
                waker.wake();
            }
        }
    }
}

/// A typed value as the plain JavaScript object the tools read.
fn to_js(value: &impl serde::Serialize) -> Result<JsValue, String> {
    value
        .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(|e| format!("could not pass the call to the page tools: {e}"))
}

/// An answer as its typed `Result`.
fn from_js<T: serde::de::DeserializeOwned>(answer: JsValue) -> Result<T, gg_agent::ToolError> {
    serde_wasm_bindgen::from_value::<Result<T, gg_agent::ToolError>>(answer).unwrap_or_else(|e| {
        Err(gg_agent::ToolError::failed(format!(
            "the page tools gave an answer of an unexpected shape: {e}"
        )))
    })
}

/// The scope's element left the page (a page that re-rendered it): nothing to work on.
fn scope_gone(state: &tools::State) -> Option<ToolErr> {
    let root = state.scope().root()?;
    (!crate::dom::attached(root)).then(|| {
        ToolErr::unavailable(
            "the part of the page this widget may use (its scope) is no longer in the page; \
             the page must set the widget's scope again",
        )
    })
}

fn busy() -> ToolErr {
    ToolErr::unavailable(
        "the page tools were called while already running a call (from a page event handler); \
         call again",
    )
}

fn not_allowed(tool: Tool, allowed: &[Tool]) -> ToolErr {
    ToolErr {
        kind: ToolErrorKind::Blocked,
        message: clip(&gg_vocab::not_allowed(tool.name(), allowed), 400),
    }
}

fn names(tools: &[Tool]) -> String {
    tools
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}
