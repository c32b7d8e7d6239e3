//! The page tools run by the content script, and element facts for the safety gate.
//!
//! Arguments arrive validated and normalised by the agent (`gg_agent::BuiltinCall::to_call`);
//! they are still read defensively (anything odd is an `invalid_arguments` error, never a panic).
//! Error messages are written here and never quote page text (tool errors reach the model
//! without the untrusted-data wrapping); successful outputs may carry page text.
//!
//! This module holds what the tools share (errors, targets, the state kept between calls,
//! argument helpers) and the dispatch on [`Tool`]; each tool's code is in a file of its own.

use alloc::format;
use alloc::string::String;
use gg_vocab::ToolErrorKind;
use wasm_bindgen::JsValue;
use web_sys::{Document, Element};

use crate::dom::{self, LookupMiss};
use crate::js::{self, Obj};
use crate::read;
use crate::scope::Scope;
use crate::slices::Work;
use crate::snapshot::{self, Refs};
use crate::text::clip;

mod act;
mod click;
mod dom_act;
mod facts;
#[path = "../gate_facts.rs"]
mod gate_facts;
mod scroll;
mod title;
mod type_text;

pub use act::{ActJob, Then};

/// A tool failure, of one of the kinds the agent knows ([`ToolErrorKind`], written in its
/// snake_case wire form).
#[derive(Debug)]
pub struct ToolErr {
    pub kind: ToolErrorKind,
    pub message: String,
}

macro_rules! kinds {
    ($($name:ident => $kind:ident),*) => {
        $(pub fn $name(message: impl Into<String>) -> Self {
            Self { kind: ToolErrorKind::$kind, message: message.into() }
        })*
    };
}

impl ToolErr {
    kinds!(
        stale_ref => StaleRef,
        not_found => NotFound,
        invalid_selector => InvalidSelector,
        invalid_arguments => InvalidArguments,
        not_interactable => NotInteractable,
        unavailable => Unavailable,
        timeout => Timeout,
        failed => Failed
    );

    pub fn to_js(&self) -> JsValue {
        Obj::new()
            .s("kind", self.kind.name())
            .s("message", &self.message)
            .js()
    }
}

/// How a call names its element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Ref(String),
    Selector(String),
}

impl Target {
    /// `{"ref": "e3"}` or `{"selector": "..."}`; `ref` wins when both are there.
    pub fn from_args(args: &JsValue) -> Result<Self, ToolErr> {
        if let Some(r) = js::get_str(args, "ref").filter(|r| !r.trim().is_empty()) {
            return Ok(Self::Ref(String::from(r.trim())));
        }
        if let Some(s) = js::get_str(args, "selector").filter(|s| !s.trim().is_empty()) {
            return Ok(Self::Selector(s));
        }
        Err(ToolErr::invalid_arguments(
            "give the element as `ref` (from snapshot_page, like e12) or `selector` (CSS)",
        ))
    }

    /// How error messages name the element: by what the model gave, never by page text.
    fn subject(&self, el: &Element) -> String {
        let what = match dom::role_of(el) {
            Some(role) => role.name,
            None => clip(&dom::tag(el), 24),
        };
        match self {
            Self::Ref(r) => format!("the {what} at ref {r}"),
            Self::Selector(s) => format!("the {what} matched by `{}`", clip(s, 80)),
        }
    }
}

/// How [`State::begin`] started a call.
pub enum Begun {
    /// Answered at once.
    Done(JsValue),
    /// To run in slices ([`crate::slices`]).
    Work(Work),
}

/// What the content script keeps between calls.
pub struct State {
    /// Where the tools may look and act (the whole page, in the content script).
    scope: Scope,
    refs: Refs,
    /// The element a selector named when the gate last asked for facts about it: the call that
    /// follows must act on that same element.
    checked: Option<(String, Element)>,
    /// The text of the last `read_page_content`, for its next pages.
    pub read_cache: Option<read::Cache>,
}

impl Default for State {
    fn default() -> Self {
        Self::new()
    }
}

fn document() -> Result<Document, ToolErr> {
    web_sys::window()
        .and_then(|w| w.document())
        .ok_or_else(|| ToolErr::unavailable("this page has no document"))
}

pub fn usize_arg(args: &JsValue, key: &str, default: usize, min: usize) -> Result<usize, ToolErr> {
    let value = js::get(args, key);
    if value.is_undefined() || value.is_null() {
        return Ok(default);
    }
    match value.as_f64() {
        Some(n) if n.is_finite() && n >= min as f64 => Ok(n as usize),
        _ => Err(ToolErr::invalid_arguments(format!(
            "`{key}` must be a whole number of at least {min}"
        ))),
    }
}

fn bool_arg(args: &JsValue, key: &str, default: bool) -> bool {
    js::get(args, key).as_bool().unwrap_or(default)
}

/// The tools a call can name: the page tools, and the two that the extension's service worker
/// runs (answered here with an `unavailable` error that says so). The agent declares the same
/// names ([`gg_vocab::Tool`]).
pub use gg_vocab::Tool;

impl State {
    pub fn new() -> Self {
        Self::within(Scope::page())
    }

    /// The state of tools confined to `scope`.
    pub fn within(scope: Scope) -> Self {
        Self {
            scope,
            refs: Refs::new(),
            checked: None,
            read_cache: None,
        }
    }

    pub fn refs_mut(&mut self) -> &mut Refs {
        &mut self.refs
    }

    /// Confines the tools to another scope (the page changed the widget's `scope`). Refs stay
    /// (those outside the new scope are refused); what was checked or read is forgotten.
    #[cfg(feature = "embedded")]
    pub fn set_scope(&mut self, scope: Scope) {
        self.scope = scope;
        self.checked = None;
        self.read_cache = None;
    }

    /// Where the tools may look and act.
    #[cfg(feature = "embedded")]
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The element of a ref, when the scope admits it.
    pub(crate) fn resolve_ref(&self, name: &str) -> Result<Element, ToolErr> {
        let el = self.refs.resolve(name)?;
        match self.scope.refuses(&el) {
            Some(refusal) => Err(ToolErr::not_found(
                refusal.message(&format!("the element at ref {}", clip(name, 24))),
            )),
            None => Ok(el),
        }
    }

    /// Starts one tool call: quick tools answer at once, the page walks come back as work to
    /// run in slices.
    #[inline(never)]
    pub fn begin(&mut self, name: &str, args: &JsValue) -> Result<Begun, ToolErr> {
        let doc = document()?;
        let Some(tool) = Tool::from_name(name) else {
            return Err(ToolErr::unavailable(format!(
                "{} is not a page tool",
                clip(name, 40)
            )));
        };
        match tool {
            Tool::ReadPageContent => Ok(Begun::Work(Work::Read(read::Job::new(
                &doc,
                &self.scope,
                args,
                &mut self.read_cache,
            )?))),
            Tool::SnapshotPage => {
                let max = js::get_f64(args, "max_tokens")
                    .filter(|n| n.is_finite() && *n >= 1.0)
                    .map(|n| n as u64);
                self.refs.prune();
                Ok(Begun::Work(Work::Snapshot(snapshot::Job::new(
                    &doc,
                    self.scope.root(),
                    max,
                )?)))
            }
            Tool::ClickElement => self.on_element(&doc, Target::from_args(args)?, Then::Click),
            Tool::TypeText => {
                let target = Target::from_args(args)?;
                let text = js::get_str(args, "text")
                    .ok_or_else(|| ToolErr::invalid_arguments("`text` is required"))?;
                let then = Then::Type {
                    text,
                    submit: bool_arg(args, "submit", false),
                    clear: bool_arg(args, "clear", true),
                };
                self.on_element(&doc, target, then)
            }
            // The quick tools: answered at once.
            Tool::ScrollPage => scroll::scroll_page(self, &doc, args).map(Begun::Done),
            Tool::GetPageTitle => Ok(Begun::Done(title::get_page_title(&doc))),
            Tool::TakeScreenshot | Tool::RunJavascript => Err(ToolErr::unavailable(format!(
                "{} is run by the extension's service worker, not inside the page",
                tool.name()
            ))),
        }
    }

    /// Starts answering the gate's `get_element_facts`: like a click, the element may need a
    /// lookup in slices first.
    pub fn begin_facts(&mut self, target: &JsValue) -> Result<Begun, ToolErr> {
        let doc = document()?;
        self.on_element(&doc, Target::from_args(target)?, Then::Facts)
    }
}

/// The tool error of a selector that found no element.
pub fn lookup_error(selector: &str, miss: LookupMiss) -> ToolErr {
    let shown = clip(selector, 80);
    match miss {
        LookupMiss::Invalid => ToolErr::invalid_selector(format!(
            "`{shown}` is not a valid CSS selector; fix it, or call snapshot_page and use a ref"
        )),
        LookupMiss::NoMatch => ToolErr::not_found(format!(
            "no element matches `{shown}`; call snapshot_page to find the element and use its ref"
        )),
        LookupMiss::Refused(refusal) => {
            ToolErr::not_found(refusal.message(&format!("the element matched by `{shown}`")))
        }
        LookupMiss::TimedOut => ToolErr::timeout(format!(
            "no element matching `{shown}` was found within {} s: the page is too large to \
             search all of its shadow roots and frames. Call snapshot_page and use a ref",
            (dom::LOOKUP_BUDGET_MS / 1000.0) as u32
        )),
    }
}
