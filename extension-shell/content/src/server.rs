//! Serving the service worker's messages. Quick tools answer at once; `snapshot_page`,
//! `read_page_content` and selector lookups walk the page in slices of at most [`SLICE_MS`],
//! giving the page's main thread back between them (the loader's `later`), and answer when done
//! or when their time budget is spent (with a partial result that says so).
//!
//! The walks' large steps are `#[inline(never)]`: each stays a function of its own in the
//! JavaScript that wasm2js writes, which V8 compiles on first use and can optimise (see
//! `ONE_CALLER_INLINE` in xtask/src/build.rs).

use alloc::collections::VecDeque;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use core::cell::RefCell;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use crate::js::{self, Obj};
use crate::slices::{SLICE_MS, Work, now};
use crate::tools::{self, ToolErr};
use crate::{log_debug, log_error, panel};

/// Protocol tag of every message (`gg_messages::PROTOCOL`).
const PROTOCOL: &str = "gemma-gem/1";
struct Pending {
    id: JsValue,
    answer: Answer,
    respond: js_sys::Function,
    work: Work,
}

/// What a request is answered with.
enum Answer {
    /// `tool_outcome` of the call `call_id`.
    Tool(String),
    /// `element_facts`.
    Facts,
}

impl Answer {
    fn body(&self, result: Result<JsValue, ToolErr>) -> Obj {
        match self {
            Self::Tool(call_id) => tool_outcome(call_id, result),
            Self::Facts => facts_answer(result),
        }
    }
}

fn facts_answer(result: Result<JsValue, ToolErr>) -> Obj {
    Obj::new()
        .s("type", "element_facts")
        .v("result", result_js(result))
}

pub struct Server {
    state: tools::State,
    panel: Option<panel::Shared>,
    own_id: String,
    host: JsValue,
    jobs: VecDeque<Pending>,
    /// `pump`, handed to the loader's `later`.
    pump: Option<js_sys::Function>,
    scheduled: bool,
    /// When this script worked on the page's main thread: `(start, end)` of its last tasks
    /// (`performance.now()`), for `get_content_stats`.
    worked: VecDeque<(f64, f64)>,
}

/// Tasks kept in [`Server::worked`].
const WORKED_KEPT: usize = 1024;

fn record(server: &Shared, start: f64) {
    if let Ok(mut s) = server.try_borrow_mut() {
        if s.worked.len() == WORKED_KEPT {
            s.worked.pop_front();
        }
        s.worked.push_back((start, now()));
    }
}

pub type Shared = Rc<RefCell<Server>>;

impl Server {
    pub fn new(panel: Option<panel::Shared>, own_id: String, host: JsValue) -> Shared {
        let shared = Rc::new(RefCell::new(Self {
            state: tools::State::new(),
            panel,
            own_id,
            host,
            jobs: VecDeque::new(),
            pump: None,
            scheduled: false,
            worked: VecDeque::new(),
        }));
        let weak = Rc::downgrade(&shared);
        let pump = Closure::<dyn FnMut()>::new(move || {
            if let Some(server) = weak.upgrade() {
                pump(&server);
            }
        });
        shared.borrow_mut().pump = Some(pump.as_ref().clone().unchecked_into());
        // The server lives as long as the page.
        pump.forget();
        shared
    }

    /// Runs the pump in a later task: `later`, or `afterFrame` for a new call's first slice
    /// (after the page's next rendering update; see `content.js`).
    fn schedule(&mut self, hook: &str) {
        if self.scheduled || self.jobs.is_empty() {
            return;
        }
        let Some(pump) = &self.pump else { return };
        let args = [pump.clone().into()];
        match js::call(&self.host, hook, &args).or_else(|_| js::call(&self.host, "later", &args)) {
            Ok(_) => self.scheduled = true,
            Err(e) => log_error(&format!("could not schedule the page tools' work: {e:?}")),
        }
    }
}

/// Runs queued calls for one slice, answers those that finish, and schedules the rest.
fn pump(server: &Shared) {
    let mut finished = alloc::vec::Vec::new();
    {
        let mut s = server.borrow_mut();
        s.scheduled = false;
        let start = now();
        let until = start + SLICE_MS;
        while let Some(mut job) = s.jobs.pop_front() {
            let Server { state, .. } = &mut *s;
            match job.work.step(state, until) {
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
        let hook = if s.jobs.front().is_some_and(|j| j.work.wants_frame()) {
            "afterFrame"
        } else {
            "later"
        };
        s.schedule(hook);
        let took = now() - start;
        drop(s);
        record(server, start);
        if took > 2.0 * SLICE_MS {
            // Whole milliseconds: float formatting is a large function to compile in a page.
            log_debug(&format!(
                "a slice of the page tools took {} ms (at {})",
                took as u64, start as u64
            ));
        }
    }
    for (job, result) in finished {
        if let (Err(e), Answer::Tool(call_id)) = (&result, &job.answer) {
            log_debug(&format!(
                "tool call {call_id} failed: {}: {}",
                e.kind.name(),
                e.message
            ));
        }
        let answer = envelope(&job.id, job.answer.body(result));
        if let Err(e) = job.respond.call1(&JsValue::UNDEFINED, &answer) {
            log_error(&format!("could not answer a tool call: {e:?}"));
        }
    }
}

fn result_js(r: Result<JsValue, ToolErr>) -> JsValue {
    match r {
        Ok(v) => Obj::new().v("Ok", v).js(),
        Err(e) => Obj::new().v("Err", e.to_js()).js(),
    }
}

fn tool_outcome(call_id: &str, r: Result<JsValue, ToolErr>) -> Obj {
    let r = r.map(|value| Obj::new().v("value", value).js());
    Obj::new()
        .s("type", "tool_outcome")
        .s("call_id", call_id)
        .v("result", result_js(r))
}

fn envelope(id: &JsValue, body: Obj) -> JsValue {
    Obj::new()
        .s("protocol", PROTOCOL)
        .v("id", id.clone())
        .s("from", "content")
        .v("body", body.js())
        .js()
}

/// The request's body, when the message is a request of ours from our own service worker;
/// `None` for anything else (other extensions, our extension pages in tabs, foreign shapes).
fn request(own_id: &str, message: &JsValue, sender: &JsValue) -> Option<(JsValue, JsValue)> {
    if own_id.is_empty() || js::get_str(sender, "id").as_deref() != Some(own_id) {
        return None;
    }
    let tab = js::get(sender, "tab");
    if !tab.is_undefined() && !tab.is_null() {
        return None;
    }
    let origin = format!("chrome-extension://{own_id}/");
    if js::get_str(sender, "url").is_some_and(|url| !url.starts_with(&origin)) {
        return None;
    }
    if js::get_str(message, "protocol").as_deref() != Some(PROTOCOL)
        || js::get_str(message, "from").as_deref() != Some("service_worker")
    {
        return None;
    }
    let id = js::get(message, "id");
    id.as_f64()?;
    Some((id, js::get(message, "body")))
}

fn reply(respond: &JsValue, answer: JsValue) {
    let Ok(respond) = respond.clone().dyn_into::<js_sys::Function>() else {
        return;
    };
    if let Err(e) = respond.call1(&JsValue::UNDEFINED, &answer) {
        log_error(&format!("could not answer a message: {e:?}"));
    }
}

/// See [`crate::on_message`].
pub fn on_message(server: &Shared, message: &JsValue, sender: &JsValue, respond: &JsValue) -> bool {
    let start = now();
    let later = handle(server, message, sender, respond);
    record(server, start);
    later
}

#[inline(never)]
fn handle(server: &Shared, message: &JsValue, sender: &JsValue, respond: &JsValue) -> bool {
    let own_id = server.borrow().own_id.clone();
    let Some((id, body)) = request(&own_id, message, sender) else {
        return false;
    };
    let Some(kind) = js::get_str(&body, "type") else {
        return false;
    };
    match kind.as_str() {
        "execute_tool" => {
            let (Some(call_id), call) = (js::get_str(&body, "call_id"), js::get(&body, "call"))
            else {
                return false;
            };
            let Some(name) = js::get_str(&call, "name") else {
                return false;
            };
            let args = js::get(&call, "args");
            log_debug(&format!("tool call {call_id}: {name}"));
            let disabled = server
                .borrow()
                .panel
                .as_ref()
                .is_some_and(panel::is_disabled);
            // Development builds: the e2e test of crash recovery panics here or in a slice.
            let debug_panic = cfg!(feature = "dev-log") && name == "__debug_panic";
            if debug_panic && !js::get_true(&args, "later") {
                panic!("__debug_panic asked for a panic");
            }
            let started = if disabled {
                Err(ToolErr::unavailable(
                    "Gemma Gem is turned off on this site (settings: disabled sites); no page \
                     tool runs here",
                ))
            } else if debug_panic {
                #[cfg(feature = "dev-log")]
                let work = Ok(tools::Begun::Work(Work::Panic));
                #[cfg(not(feature = "dev-log"))]
                let work = Err(ToolErr::unavailable("no such tool"));
                work
            } else {
                let mut s = server.borrow_mut();
                s.state.begin(&name, &args)
            };
            match started {
                Ok(tools::Begun::Done(value)) => {
                    reply(respond, envelope(&id, tool_outcome(&call_id, Ok(value))));
                    false
                }
                Err(e) => {
                    log_debug(&format!(
                        "tool call {call_id} failed: {}: {}",
                        e.kind.name(),
                        e.message
                    ));
                    reply(respond, envelope(&id, tool_outcome(&call_id, Err(e))));
                    false
                }
                Ok(tools::Begun::Work(work)) => {
                    queue(server, id, Answer::Tool(call_id), respond, work)
                }
            }
        }
        "get_element_facts" => {
            let started = server
                .borrow_mut()
                .state
                .begin_facts(&js::get(&body, "target"));
            match started {
                Ok(tools::Begun::Done(facts)) => {
                    reply(respond, envelope(&id, facts_answer(Ok(facts))));
                    false
                }
                Err(e) => {
                    reply(respond, envelope(&id, facts_answer(Err(e))));
                    false
                }
                Ok(tools::Begun::Work(work)) => queue(server, id, Answer::Facts, respond, work),
            }
        }
        "panel_command" => {
            let Some(command) =
                js::get_str(&body, "action").and_then(|a| panel::Command::parse(&a))
            else {
                return false;
            };
            let panel = server.borrow().panel.clone();
            if let Some(panel) = panel
                && let Err(e) = panel::run(&panel, command)
            {
                log_error(&format!("could not {command:?} the panel: {e:?}"));
            }
            reply(respond, envelope(&id, Obj::new().s("type", "ack")));
            false
        }
        // Development builds: what the bench and the e2e tests read (memory, and the tasks this
        // script ran since the last call, to match with the page's long tasks).
        "get_content_stats" if cfg!(feature = "dev-log") => {
            let worked = core::mem::take(&mut server.borrow_mut().worked);
            let tasks = js_sys::Array::new();
            let mut longest = 0.0f64;
            for (start, end) in worked {
                longest = longest.max(end - start);
                let pair = js_sys::Array::new();
                pair.push(&JsValue::from_f64(start));
                pair.push(&JsValue::from_f64(end));
                tasks.push(&pair);
            }
            let body = Obj::new()
                .s("type", "content_stats")
                .n("memory_bytes", crate::memory_bytes())
                .n("longest_task_ms", longest)
                .v("tasks", tasks);
            reply(respond, envelope(&id, body));
            false
        }
        _ => false,
    }
}

/// Queues work that answers later; `true` (the answer comes through `respond`).
fn queue(server: &Shared, id: JsValue, answer: Answer, respond: &JsValue, work: Work) -> bool {
    let Ok(respond) = respond.clone().dyn_into::<js_sys::Function>() else {
        return false;
    };
    let mut s = server.borrow_mut();
    s.jobs.push_back(Pending {
        id,
        answer,
        respond,
        work,
    });
    s.schedule("afterFrame");
    true
}

const CRASHED: &str = "the page tools failed inside the page while running this call and were \
                       restarted; the call may not have finished. Refs from earlier snapshots \
                       are gone: call snapshot_page again before using refs.";

/// See [`crate::recover`].
pub fn recover(server: &Shared, message: &JsValue, sender: &JsValue, respond: &JsValue) {
    let own_id = server.borrow().own_id.clone();
    let Some((id, body)) = request(&own_id, message, sender) else {
        return;
    };
    let answer = match js::get_str(&body, "type").as_deref() {
        Some("execute_tool") => {
            let Some(call_id) = js::get_str(&body, "call_id") else {
                return;
            };
            tool_outcome(&call_id, Err(ToolErr::failed(CRASHED)))
        }
        Some("get_element_facts") => facts_answer(Err(ToolErr::failed(CRASHED))),
        Some("panel_command") => Obj::new().s("type", "ack"),
        _ => return,
    };
    reply(respond, envelope(&id, answer));
}

/// See [`crate::report_crash`]: a `content_crashed` message to the service worker.
pub fn report_crash(detail: &str) {
    let runtime = js::get(&js::get(&js_sys::global(), "chrome"), "runtime");
    let message = Obj::new()
        .s("protocol", PROTOCOL)
        .n("id", 0.0)
        .s("from", "content")
        .v(
            "body",
            Obj::new()
                .s("type", "content_crashed")
                .s("detail", &crate::text::clip(detail, 600))
                .js(),
        )
        .js();
    match js::call(&runtime, "sendMessage", &[message]) {
        // A promise: its rejection (no listener) is not an error of ours.
        Ok(promise) => {
            if let Ok(promise) = promise.dyn_into::<js_sys::Promise>() {
                let ignore = Closure::<dyn FnMut(JsValue)>::new(|e: JsValue| {
                    log_debug(&format!(
                        "the service worker did not take the crash report: {e:?}"
                    ));
                });
                let _ = promise.catch(&ignore);
                ignore.forget();
            }
        }
        Err(e) => log_error(&format!("could not tell the service worker: {e:?}")),
    }
}
