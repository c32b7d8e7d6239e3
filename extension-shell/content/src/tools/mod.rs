//! The page tools run by the content script, and element facts for the safety gate.
//!
//! Arguments arrive validated and normalised by the agent (`gg_agent::BuiltinCall::to_call`);
//! they are still read defensively (anything odd is an `invalid_arguments` error, never a panic).
//! Error messages are written here and never quote page text (tool errors reach the model
//! without the untrusted-data wrapping); successful outputs may carry page text.

use alloc::format;
use alloc::string::{String, ToString};
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{Document, Element, Event, Node};

use crate::dom::{self, Looked, Lookup, LookupMiss};
use crate::js::{self, Obj};
use crate::read;
use crate::server::Work;
use crate::snapshot::{self, Refs};
use crate::text::clip;

#[path = "../gate_facts.rs"]
mod gate_facts;

/// A tool failure: `kind` is a `gg_agent::ToolErrorKind` in its snake_case wire form.
#[derive(Debug)]
pub struct ToolErr {
    pub kind: &'static str,
    pub message: String,
}

macro_rules! kinds {
    ($($name:ident),*) => {
        $(pub fn $name(message: impl Into<String>) -> Self {
            Self { kind: stringify!($name), message: message.into() }
        })*
    };
}

impl ToolErr {
    kinds!(
        stale_ref,
        not_found,
        invalid_selector,
        invalid_arguments,
        not_interactable,
        unavailable,
        timeout,
        failed
    );

    pub fn to_js(&self) -> JsValue {
        Obj::new()
            .s("kind", self.kind)
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
    /// To run in slices ([`crate::server`]).
    Work(Work),
}

/// What the content script keeps between calls.
pub struct State {
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

impl State {
    pub fn new() -> Self {
        Self {
            refs: Refs::new(),
            checked: None,
            read_cache: None,
        }
    }

    /// The element `target` names, or the lookup to run in slices (a selector that the
    /// document itself does not match: open shadow roots and frames are searched).
    fn locate(&self, doc: &Document, target: &Target) -> Result<Located, ToolErr> {
        match target {
            Target::Ref(r) => self.refs.resolve(r).map(Located::Found),
            Target::Selector(s) => match Lookup::start(doc, s) {
                Looked::Found(el) => Ok(Located::Found(el)),
                Looked::Miss(miss) => Err(lookup_error(s, miss)),
                Looked::Walk(lookup) => Ok(Located::Walk(lookup)),
            },
        }
    }

    /// Starts `then` on the element of `target`: at once when it is known, else as work that
    /// looks it up in slices first.
    fn on_element(&mut self, doc: &Document, target: Target, then: Then) -> Result<Begun, ToolErr> {
        match self.locate(doc, &target)? {
            Located::Found(el) => self.finish(&target, &el, &then).map(Begun::Done),
            Located::Walk(lookup) => Ok(Begun::Work(Work::Act(ActJob {
                target,
                lookup,
                then,
                found: None,
            }))),
        }
    }

    /// Does `then` on `el`, the element `target` named.
    fn finish(&mut self, target: &Target, el: &Element, then: &Then) -> Result<JsValue, ToolErr> {
        match then {
            Then::Facts => {
                self.checked = match target {
                    Target::Selector(s) => Some((s.clone(), el.clone())),
                    Target::Ref(_) => None,
                };
                Ok(element_facts(el))
            }
            Then::Click => {
                self.check_same(target, el)?;
                click(target, el)
            }
            Then::Type {
                text,
                submit,
                clear,
            } => {
                self.check_same(target, el)?;
                type_text(target, el, text, *submit, *clear)
            }
        }
    }

    /// A click or typing by selector must still act on the element the gate was told about, if
    /// it asked.
    fn check_same(&mut self, target: &Target, el: &Element) -> Result<(), ToolErr> {
        let checked = self.checked.take();
        if let (Target::Selector(s), Some((checked_selector, checked_el))) = (target, checked)
            && *s == checked_selector
            && checked_el != *el
        {
            return Err(ToolErr::stale_ref(format!(
                "`{}` now matches another element than the one checked a moment ago: the page \
                 changed. Call snapshot_page and use a ref.",
                clip(s, 80)
            )));
        }
        Ok(())
    }

    pub fn refs_mut(&mut self) -> &mut Refs {
        &mut self.refs
    }

    /// Starts one tool call: quick tools answer at once, the page walks come back as work to
    /// run in slices.
    #[inline(never)]
    pub fn begin(&mut self, name: &str, args: &JsValue) -> Result<Begun, ToolErr> {
        let doc = document()?;
        match name {
            "read_page_content" => Ok(Begun::Work(Work::Read(read::Job::new(
                &doc,
                args,
                &mut self.read_cache,
            )?))),
            "snapshot_page" => {
                let max = js::get_f64(args, "max_tokens")
                    .filter(|n| n.is_finite() && *n >= 1.0)
                    .map(|n| n as u64);
                self.refs.prune();
                Ok(Begun::Work(Work::Snapshot(snapshot::Job::new(&doc, max)?)))
            }
            "click_element" => self.on_element(&doc, Target::from_args(args)?, Then::Click),
            "type_text" => {
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
            _ => self.execute(&doc, name, args).map(Begun::Done),
        }
    }

    /// Starts answering the gate's `get_element_facts`: like a click, the element may need a
    /// lookup in slices first.
    pub fn begin_facts(&mut self, target: &JsValue) -> Result<Begun, ToolErr> {
        let doc = document()?;
        self.on_element(&doc, Target::from_args(target)?, Then::Facts)
    }

    /// Runs one quick tool call.
    fn execute(&mut self, doc: &Document, name: &str, args: &JsValue) -> Result<JsValue, ToolErr> {
        let doc = doc.clone();
        match name {
            "scroll_page" => {
                if let Some(r) = js::get_str(args, "ref").filter(|r| !r.trim().is_empty()) {
                    let target = Target::Ref(String::from(r.trim()));
                    let el = self.refs.resolve(r.trim())?;
                    scroll_to(&target, &el)
                } else {
                    scroll_by(&doc, args)
                }
            }
            "get_page_title" => {
                let href = web_sys::window()
                    .and_then(|w| w.location().href().ok())
                    .unwrap_or_default();
                Ok(Obj::new().s("title", &doc.title()).s("url", &href).js())
            }
            "take_screenshot" | "run_javascript" => Err(ToolErr::unavailable(format!(
                "{name} is run by the extension's service worker, not inside the page"
            ))),
            _ => Err(ToolErr::unavailable(format!(
                "{} is not a page tool",
                clip(name, 40)
            ))),
        }
    }
}

/// Where [`State::locate`] found the element.
enum Located {
    Found(Element),
    Walk(Lookup),
}

/// What a call does with its element once it is found.
pub enum Then {
    Click,
    Type {
        text: String,
        submit: bool,
        clear: bool,
    },
    /// The gate's element facts.
    Facts,
}

/// A click, typing or element facts whose selector is being looked up in slices.
pub struct ActJob {
    target: Target,
    lookup: Lookup,
    then: Then,
    /// The element, found in an earlier slice: it is acted on in a slice of its own, after the
    /// page's next rendering update, so the style and layout the page has pending are not
    /// forced inside the same task as the search (on a page of 100,000 elements, together they
    /// are more than 50 ms).
    found: Option<Element>,
}

impl ActJob {
    /// Looks on until `until`; the answer once the element is found and acted on, or not found.
    #[inline(never)]
    pub fn step(&mut self, state: &mut State, until: f64) -> Option<Result<JsValue, ToolErr>> {
        if let Some(el) = self.found.take() {
            return Some(state.finish(&self.target, &el, &self.then));
        }
        match self.lookup.step(until)? {
            Ok(el) => {
                self.found = Some(el);
                None
            }
            Err(miss) => {
                let (Target::Selector(s) | Target::Ref(s)) = &self.target;
                Some(Err(lookup_error(s, miss)))
            }
        }
    }

    /// The element is found and waits for the next rendering update.
    pub fn wants_frame(&self) -> bool {
        self.found.is_some()
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
        LookupMiss::TimedOut => ToolErr::timeout(format!(
            "no element matching `{shown}` was found within {} s: the page is too large to \
             search all of its shadow roots and frames. Call snapshot_page and use a ref",
            (dom::LOOKUP_BUDGET_MS / 1000.0) as u32
        )),
    }
}

// ---------------------------------------------------------------- acting on elements

/// Fails for an element that cannot be acted on: hidden or disabled.
fn check_usable(target: &Target, el: &Element) -> Result<(), ToolErr> {
    if !dom::attached(el) {
        return Err(ToolErr::stale_ref(format!(
            "{} is no longer in the page; call snapshot_page again",
            target.subject(el)
        )));
    }
    if let Some(reason) = dom::hidden_reason(el) {
        return Err(ToolErr::not_interactable(format!(
            "{} cannot be used: {reason}. Call snapshot_page to find a visible element",
            target.subject(el)
        )));
    }
    if dom::is_disabled(el) {
        return Err(ToolErr::not_interactable(format!(
            "{} is disabled; it cannot be used until the page enables it",
            target.subject(el)
        )));
    }
    Ok(())
}

fn scroll_into_view(el: &Element, block: &str) {
    let options = Obj::new()
        .s("block", block)
        .s("inline", "nearest")
        .s("behavior", "instant")
        .js();
    let _ = js::call(el, "scrollIntoView", &[options]);
}

fn viewport(el: &Element) -> (f64, f64) {
    let Some(win) = dom::window_of(el) else {
        return (0.0, 0.0);
    };
    let get = |v: Result<JsValue, JsValue>| v.ok().and_then(|v| v.as_f64()).unwrap_or(0.0);
    (get(win.inner_width()), get(win.inner_height()))
}

fn dispatch(el: &Element, ctor: &str, kind: &str, init: &Obj) -> bool {
    let Ok(event) = js::construct(ctor, &[JsValue::from_str(kind), init.0.clone().into()]) else {
        return true;
    };
    el.dispatch_event(event.unchecked_ref::<Event>())
        .unwrap_or(true)
}

fn focus(el: &Element) {
    let _ = js::call(el, "focus", &[Obj::new().b("preventScroll", true).js()]);
}

/// `hit` is `el`, inside it, or a `<label>` of it.
fn hit_is_target(el: &Element, hit: &Element) -> bool {
    if dom::composed_contains(el, hit) {
        return true;
    }
    hit.closest("label")
        .ok()
        .flatten()
        .is_some_and(|label| js::get(&label, "control") == JsValue::from(el.clone()))
}

#[inline(never)]
fn click(target: &Target, el: &Element) -> Result<JsValue, ToolErr> {
    check_usable(target, el)?;
    scroll_into_view(el, "center");
    let rect = el.get_bounding_client_rect();
    let (vw, vh) = viewport(el);
    let (left, right) = (rect.left().max(0.0), rect.right().min(vw));
    let (top, bottom) = (rect.top().max(0.0), rect.bottom().min(vh));
    if right <= left || bottom <= top {
        return Err(ToolErr::not_interactable(format!(
            "{} is outside the visible area even after scrolling",
            target.subject(el)
        )));
    }
    let (x, y) = ((left + right) / 2.0, (top + bottom) / 2.0);
    // Hit-test at the click point, in the element's document and in every frame around it.
    let (mut node, mut px, mut py) = (el.clone(), x, y);
    loop {
        let Some(doc) = node.owner_document() else {
            break;
        };
        let hit = dom::deep_element_from_point(&doc, px as f32, py as f32);
        match hit {
            Some(hit) if hit_is_target(&node, &hit) => {}
            Some(hit) => {
                let by = if dom::is_own_host(&hit) {
                    String::from("the Gemma Gem panel")
                } else {
                    format!("another element (<{}>)", clip(&dom::tag(&hit), 24))
                };
                return Err(ToolErr::not_interactable(format!(
                    "{} is covered by {by} at its centre; close or move what covers it (a \
                     dialog, banner or overlay) first, or scroll",
                    target.subject(el)
                )));
            }
            None => {
                return Err(ToolErr::not_interactable(format!(
                    "{} is not at a clickable point of the page",
                    target.subject(el)
                )));
            }
        }
        let frame = doc
            .default_view()
            .and_then(|w| w.frame_element().ok().flatten());
        let Some(frame) = frame else {
            break;
        };
        let r = frame.get_bounding_client_rect();
        px += r.left() + f64::from(frame.client_left());
        py += r.top() + f64::from(frame.client_top());
        node = frame;
    }

    let view: JsValue = dom::window_of(el).map_or(JsValue::NULL, Into::into);
    let init = |bubbles: bool, buttons: f64| {
        Obj::new()
            .b("bubbles", bubbles)
            .b("cancelable", bubbles)
            .b("composed", true)
            .v("view", view.clone())
            .n("clientX", x)
            .n("clientY", y)
            .n("screenX", x)
            .n("screenY", y)
            .n("button", 0.0)
            .n("buttons", buttons)
            .n("detail", 1.0)
            .n("pointerId", 1.0)
            .s("pointerType", "mouse")
            .b("isPrimary", true)
    };
    let (pe, me) = ("PointerEvent", "MouseEvent");
    dispatch(el, pe, "pointerover", &init(true, 0.0));
    dispatch(el, pe, "pointerenter", &init(false, 0.0));
    dispatch(el, me, "mouseover", &init(true, 0.0));
    dispatch(el, me, "mouseenter", &init(false, 0.0));
    dispatch(el, pe, "pointermove", &init(true, 0.0));
    dispatch(el, me, "mousemove", &init(true, 0.0));
    let pointer_down = dispatch(el, pe, "pointerdown", &init(true, 1.0));
    if pointer_down && dispatch(el, me, "mousedown", &init(true, 1.0)) {
        focus(el);
    }
    dispatch(el, pe, "pointerup", &init(true, 0.0));
    if pointer_down {
        dispatch(el, me, "mouseup", &init(true, 0.0));
    }
    // A dispatched click runs the element's activation behaviour (follow a link, toggle a
    // checkbox, submit a form).
    dispatch(el, me, "click", &init(true, 0.0));
    Ok(Obj::new().s("clicked", &dom::describe(el)).js())
}

// ---------------------------------------------------------------- type_text

/// `key` and `code` of a typed character.
fn key_init(c: char) -> Obj {
    let (key, code, key_code): (String, String, f64) = match c {
        '\n' => ("Enter".into(), "Enter".into(), 13.0),
        ' ' => (" ".into(), "Space".into(), 32.0),
        'a'..='z' | 'A'..='Z' => (
            c.to_string(),
            format!("Key{}", c.to_ascii_uppercase()),
            f64::from(c.to_ascii_uppercase() as u32),
        ),
        '0'..='9' => (c.to_string(), format!("Digit{c}"), f64::from(c as u32)),
        _ => (c.to_string(), String::new(), 0.0),
    };
    Obj::new()
        .b("bubbles", true)
        .b("cancelable", true)
        .b("composed", true)
        .s("key", &key)
        .s("code", &code)
        .n("keyCode", key_code)
        .n("which", key_code)
        .n(
            "charCode",
            if c == '\n' { 13.0 } else { f64::from(c as u32) },
        )
}

fn input_init(input_type: &str, data: Option<&str>, cancelable: bool) -> Obj {
    Obj::new()
        .b("bubbles", true)
        .b("cancelable", cancelable)
        .b("composed", true)
        .s("inputType", input_type)
        .opt("data", data)
}

/// The value setter of `HTMLInputElement.prototype` (or of the text area/select prototype):
/// frameworks such as React install their own `value` property on the element, and only the
/// prototype's setter changes the value behind their back so their change tracking sees it.
fn native_set_value(el: &Element, value: &str) -> Result<(), JsValue> {
    let ctor = match dom::tag(el).as_str() {
        "textarea" => "HTMLTextAreaElement",
        "select" => "HTMLSelectElement",
        _ => "HTMLInputElement",
    };
    let proto = js::get(&js::get(&js_sys::global(), ctor), "prototype");
    let descriptor = js_sys::Reflect::get_own_property_descriptor(
        proto.unchecked_ref::<js_sys::Object>(),
        &"value".into(),
    )?;
    let setter: js_sys::Function = js::get(&descriptor, "set").dyn_into()?;
    setter.call1(el, &JsValue::from_str(value))?;
    Ok(())
}

fn current_value(el: &Element) -> String {
    js::get_str(el, "value").unwrap_or_default()
}

/// Types into an `<input>` or `<textarea>` one character at a time (key events, beforeinput,
/// the native setter, input), then fires `change`. Never reads a password field's value.
fn type_into_field(
    el: &Element,
    text: &str,
    clear: bool,
    per_char: bool,
) -> Result<usize, ToolErr> {
    let password = dom::is_password(el);
    let set = |v: &str| {
        native_set_value(el, v).map_err(|_| ToolErr::failed("the field did not accept the text"))
    };
    let mut typed = String::new();
    if clear {
        let empty = password || !current_value(el).is_empty();
        if empty
            && dispatch(
                el,
                "InputEvent",
                "beforeinput",
                &input_init("deleteContent", None, true),
            )
        {
            set("")?;
            dispatch(
                el,
                "InputEvent",
                "input",
                &input_init("deleteContent", None, false),
            );
        }
    }
    let multiline = dom::tag(el) == "textarea";
    let mut count = 0usize;
    if !per_char {
        let base = if clear {
            String::new()
        } else {
            current_value(el)
        };
        if dispatch(
            el,
            "InputEvent",
            "beforeinput",
            &input_init("insertText", Some(text), true),
        ) {
            set(&format!("{base}{text}"))?;
            dispatch(
                el,
                "InputEvent",
                "input",
                &input_init("insertText", Some(text), false),
            );
            count = text.chars().count();
        }
    } else {
        for c in text.chars() {
            if c == '\r' || (c == '\n' && !multiline) {
                continue;
            }
            let mut buf = [0u8; 4];
            let ch: &str = c.encode_utf8(&mut buf);
            let keys = key_init(c);
            let mut go = dispatch(el, "KeyboardEvent", "keydown", &keys);
            if go && c != '\n' {
                go = dispatch(el, "KeyboardEvent", "keypress", &keys);
            }
            let (kind, data) = if c == '\n' {
                ("insertLineBreak", None)
            } else {
                ("insertText", Some(ch))
            };
            if go
                && dispatch(
                    el,
                    "InputEvent",
                    "beforeinput",
                    &input_init(kind, data, true),
                )
            {
                if password {
                    if clear {
                        typed.push(c);
                        set(&typed)?;
                    } else {
                        // Append without reading the password: setRangeText clamps the
                        // position to the end of the value.
                        let args = [
                            ch.into(),
                            JsValue::from_f64(1e9),
                            JsValue::from_f64(1e9),
                            "end".into(),
                        ];
                        js::call(el, "setRangeText", &args)
                            .map_err(|_| ToolErr::failed("the field did not accept the text"))?;
                    }
                } else {
                    let now = current_value(el);
                    set(&format!("{now}{ch}"))?;
                }
                dispatch(el, "InputEvent", "input", &input_init(kind, data, false));
                count += 1;
            }
            dispatch(el, "KeyboardEvent", "keyup", &keys);
        }
    }
    dispatch(el, "Event", "change", &Obj::new().b("bubbles", true));
    Ok(count)
}

/// Types into a contenteditable element: `insertText` through the editing commands (the events
/// editors listen to), or DOM insertion with input events where that is refused.
fn type_into_editable(el: &Element, text: &str, clear: bool) -> Result<usize, ToolErr> {
    let doc = el
        .owner_document()
        .ok_or_else(|| ToolErr::failed("the element has no document"))?;
    let selection = js::call(&doc, "getSelection", &[]).unwrap_or(JsValue::NULL);
    if !selection.is_null() {
        if clear {
            let _ = js::call(&selection, "selectAllChildren", &[el.into()]);
        } else {
            let _ = js::call(&selection, "selectAllChildren", &[el.into()]);
            let _ = js::call(&selection, "collapseToEnd", &[]);
        }
    }
    let before = el.text_content().unwrap_or_default();
    let done = js::call(
        &doc,
        "execCommand",
        &["insertText".into(), JsValue::FALSE, text.into()],
    )
    .ok()
    .and_then(|v| v.as_bool())
    .unwrap_or(false);
    let after = el.text_content().unwrap_or_default();
    if !done || (after == before && !text.is_empty()) {
        if !dispatch(
            el,
            "InputEvent",
            "beforeinput",
            &input_init("insertText", Some(text), true),
        ) {
            return Ok(0);
        }
        if clear {
            el.set_text_content(Some(text));
        } else {
            let node = doc.create_text_node(text);
            el.append_child(&node)
                .map_err(|_| ToolErr::failed("the element did not accept the text"))?;
        }
        dispatch(
            el,
            "InputEvent",
            "input",
            &input_init("insertText", Some(text), false),
        );
    }
    Ok(text.chars().count())
}

/// Picks the option of a `<select>` whose text or value is `text`.
fn choose_option(target: &Target, el: &Element, text: &str) -> Result<usize, ToolErr> {
    let wanted = crate::text::one_line(text);
    let options = js::get(el, "options");
    let count = js::get_f64(&options, "length").unwrap_or(0.0) as u32;
    for i in 0..count {
        let option = js::get(&options, &format!("{i}"));
        let label = crate::text::one_line(&js::get_str(&option, "text").unwrap_or_default());
        let value = js::get_str(&option, "value").unwrap_or_default();
        if label.eq_ignore_ascii_case(&wanted) || value == text {
            if js::get_true(&option, "disabled") {
                break;
            }
            let _ = js_sys::Reflect::set(
                el,
                &"selectedIndex".into(),
                &JsValue::from_f64(f64::from(i)),
            );
            dispatch(
                el,
                "Event",
                "input",
                &Obj::new().b("bubbles", true).b("composed", true),
            );
            dispatch(el, "Event", "change", &Obj::new().b("bubbles", true));
            return Ok(text.chars().count());
        }
    }
    Err(ToolErr::not_found(format!(
        "{} has no enabled option with that text or value; call snapshot_page or \
         read_page_content to see its options",
        target.subject(el)
    )))
}

/// Presses Enter in the field; when the page does not handle the key itself, submits the form
/// the way a browser does (a click on its default button, or `requestSubmit`).
fn press_enter(el: &Element) -> bool {
    let keys = key_init('\n');
    let down = dispatch(el, "KeyboardEvent", "keydown", &keys);
    let press = down && dispatch(el, "KeyboardEvent", "keypress", &keys);
    let mut submitted = false;
    if press {
        let form = js::get(el, "form");
        if !form.is_null() && !form.is_undefined() {
            let form: Element = form.unchecked_into();
            let button = form
                .query_selector("button:not([type]), button[type=submit i], input[type=submit i], input[type=image i]")
                .ok()
                .flatten();
            match button {
                Some(button) if !dom::is_disabled(&button) => {
                    let init = Obj::new()
                        .b("bubbles", true)
                        .b("cancelable", true)
                        .b("composed", true)
                        .n("detail", 0.0);
                    dispatch(&button, "MouseEvent", "click", &init);
                    submitted = true;
                }
                Some(_) => {}
                None => submitted = js::call(&form, "requestSubmit", &[]).is_ok(),
            }
        }
    }
    dispatch(el, "KeyboardEvent", "keyup", &keys);
    submitted
}

#[inline(never)]
fn type_text(
    target: &Target,
    el: &Element,
    text: &str,
    submit: bool,
    clear: bool,
) -> Result<JsValue, ToolErr> {
    check_usable(target, el)?;
    let tag = dom::tag(el);
    let readonly = (matches!(tag.as_str(), "input" | "textarea") && el.has_attribute("readonly"))
        || dom::attr(el, "aria-readonly").as_deref() == Some("true");
    if readonly {
        return Err(ToolErr::not_interactable(format!(
            "{} is read-only; it cannot be typed into",
            target.subject(el)
        )));
    }
    // Judged before typing, while the page's layout is clean: the secret check looks at the
    // field's box, and after the value changes that would force the browser to lay out the
    // page again inside this task (56-68 ms on a page of 100,000 elements).
    let secret = crate::secret::secret_kind(el, None, false).is_some();
    let html: &web_sys::HtmlElement = el.unchecked_ref();
    scroll_into_view(el, "nearest");
    focus(el);
    let typed = match tag.as_str() {
        "input" => {
            let ty = dom::input_type(el);
            let per_char = matches!(
                ty.as_str(),
                "text" | "search" | "email" | "url" | "tel" | "password"
            );
            if !dom::is_text_input_type(&ty) && ty != "range" && ty != "color" {
                return Err(ToolErr::not_interactable(format!(
                    "{} is a {ty} input, not a text field{}",
                    target.subject(el),
                    if matches!(
                        ty.as_str(),
                        "checkbox" | "radio" | "button" | "submit" | "reset" | "image"
                    ) {
                        "; use click_element"
                    } else {
                        ""
                    }
                )));
            }
            type_into_field(el, text, clear, per_char)?
        }
        "textarea" => type_into_field(el, text, clear, true)?,
        "select" => choose_option(target, el, text)?,
        _ if html.is_content_editable() => type_into_editable(el, text, clear)?,
        _ => {
            return Err(ToolErr::not_interactable(format!(
                "{} is not a text field, text area or editable element; call snapshot_page and \
                 pick a textbox",
                target.subject(el)
            )));
        }
    };
    let submitted = submit && press_enter(el);
    let mut out = Obj::new()
        .s("typed_into", &dom::describe(el))
        .n("typed_chars", typed as f64);
    // The value is shown back, except a secret field's (password, code, card, hidden).
    if !secret {
        let value = if matches!(tag.as_str(), "input" | "textarea" | "select") {
            current_value(el)
        } else {
            el.text_content().unwrap_or_default()
        };
        out = out.s("value_now", &clip(&value, 300));
    }
    if submit {
        out = out.b("submitted", submitted);
        if !submitted {
            out = out.s(
                "note",
                "Enter was pressed; there was no form to submit (the page may still have \
                 reacted to the key)",
            );
        }
    }
    Ok(out.js())
}

// ---------------------------------------------------------------- scroll_page

fn scroll_to(target: &Target, el: &Element) -> Result<JsValue, ToolErr> {
    if dom::hidden_reason(el).is_some() {
        return Err(ToolErr::not_interactable(format!(
            "{} is hidden, so it cannot be scrolled into view",
            target.subject(el)
        )));
    }
    scroll_into_view(el, "center");
    let rect = el.get_bounding_client_rect();
    let (vw, vh) = viewport(el);
    let in_view = rect.bottom() > 0.0 && rect.right() > 0.0 && rect.top() < vh && rect.left() < vw;
    Ok(Obj::new()
        .s("scrolled_to", &dom::describe(el))
        .b("in_view", in_view)
        .js())
}

#[inline(never)]
fn scroll_by(doc: &Document, args: &JsValue) -> Result<JsValue, ToolErr> {
    let direction = js::get_str(args, "direction")
        .ok_or_else(|| {
            ToolErr::invalid_arguments("give a `direction` (up, down, left, right) or a `ref`")
        })?
        .to_ascii_lowercase();
    let win = doc
        .default_view()
        .ok_or_else(|| ToolErr::unavailable("the page has no window"))?;
    let get = |v: Result<JsValue, JsValue>| v.ok().and_then(|v| v.as_f64()).unwrap_or(0.0);
    let (vw, vh) = (get(win.inner_width()), get(win.inner_height()));
    let vertical = direction == "up" || direction == "down";
    let default = if vertical { vh } else { vw } * 0.8;
    let amount = match js::get_f64(args, "amount") {
        Some(a) if a.is_finite() && a > 0.0 => a,
        _ => default,
    };
    let (dx, dy) = match direction.as_str() {
        "up" => (0.0, -amount),
        "down" => (0.0, amount),
        "left" => (-amount, 0.0),
        "right" => (amount, 0.0),
        _ => {
            return Err(ToolErr::invalid_arguments(
                "`direction` must be up, down, left or right",
            ));
        }
    };
    let position = |w: &web_sys::Window| (w.scroll_x().unwrap_or(0.0), w.scroll_y().unwrap_or(0.0));
    let before = position(&win);
    let options = Obj::new()
        .n("left", dx)
        .n("top", dy)
        .s("behavior", "instant")
        .js();
    let _ = js::call(&win, "scrollBy", core::slice::from_ref(&options));
    let after = position(&win);
    let mut moved = (after.0 - before.0, after.1 - before.1);
    let mut container = None;
    if moved == (0.0, 0.0) {
        // The window does not scroll that way: scroll the scrollable box at the viewport's
        // centre (apps often scroll an inner element).
        if let Some(el) = scrollable_at_centre(doc, vw, vh, vertical) {
            let start = (f64::from(el.scroll_left()), f64::from(el.scroll_top()));
            let _ = js::call(&el, "scrollBy", &[options]);
            moved = (
                f64::from(el.scroll_left()) - start.0,
                f64::from(el.scroll_top()) - start.1,
            );
            container = Some(el);
        }
    }
    let root = doc.scrolling_element().or_else(|| doc.document_element());
    let (page_w, page_h) = root.map_or((0, 0), |r| (r.scroll_width(), r.scroll_height()));
    let pos = position(&win);
    let mut out = Obj::new()
        .s("direction", &direction)
        .n("moved_x", moved.0)
        .n("moved_y", moved.1)
        .n("scroll_x", pos.0)
        .n("scroll_y", pos.1)
        .n("page_width", f64::from(page_w))
        .n("page_height", f64::from(page_h))
        .n("viewport_width", vw)
        .n("viewport_height", vh);
    if let Some(el) = &container {
        out = out.s("scrolled_element", &dom::describe(el));
    }
    if moved == (0.0, 0.0) {
        out = out.s(
            "note",
            &format!("nothing moved: the page cannot scroll further {direction}"),
        );
    }
    Ok(out.js())
}

fn scrollable_at_centre(doc: &Document, vw: f64, vh: f64, vertical: bool) -> Option<Element> {
    let hit = dom::deep_element_from_point(doc, (vw / 2.0) as f32, (vh / 2.0) as f32)?;
    let mut current: Option<Node> = Some(hit.into());
    while let Some(node) = current {
        if let Some(el) = dom::as_element(&node)
            && !dom::is_own_host(&el)
        {
            let (size, client) = if vertical {
                (el.scroll_height(), el.client_height())
            } else {
                (el.scroll_width(), el.client_width())
            };
            if size > client
                && let Some(style) = dom::computed_style(&el)
            {
                let overflow =
                    dom::style_prop(&style, if vertical { "overflow-y" } else { "overflow-x" });
                if matches!(overflow.as_str(), "auto" | "scroll" | "overlay") {
                    return Some(el);
                }
            }
        }
        current = dom::composed_parent(&node);
    }
    None
}

// ---------------------------------------------------------------- element facts

fn field_facts(el: &Element) -> JsValue {
    let tag = dom::tag(el);
    let input_type = match tag.as_str() {
        "input" | "button" => Some(dom::input_type(el)),
        _ => None,
    };
    let role = dom::role_of(el);
    let label = dom::accessible_name(el, role.as_ref().map(|r| r.name.as_str()));
    let facts = Obj::new()
        .s("tag", &tag)
        .opt("input_type", input_type.as_deref())
        .opt("autocomplete", dom::attr(el, "autocomplete").as_deref())
        .opt("name", dom::attr(el, "name").as_deref())
        .opt("id", dom::attr(el, "id").as_deref())
        .opt("label", (!label.is_empty()).then_some(label.as_str()))
        .opt("placeholder", dom::attr(el, "placeholder").as_deref());
    gate_facts::field_extras(el, facts).js()
}

/// `gg_agent::ElementFacts` in its serde form. Never a value.
#[inline(never)]
fn element_facts(el: &Element) -> JsValue {
    let tag = dom::tag(el);
    let ty = dom::input_type(el);
    let is_submit = (tag == "button" && ty == "submit")
        || (tag == "input" && (ty == "submit" || ty == "image"));
    let form = js::get(el, "form");
    let form = if form.is_null() || form.is_undefined() {
        JsValue::NULL
    } else {
        let fields = js_sys::Array::new();
        let elements = js::get(&form, "elements");
        let count = js::get_f64(&elements, "length").unwrap_or(0.0) as u32;
        for i in 0..count.min(500) {
            let field = js::get(&elements, &format!("{i}"));
            if field.is_object() {
                fields.push(&field_facts(field.unchecked_ref()));
            }
        }
        Obj::new()
            .opt("action", js::get_str(&form, "action").as_deref())
            .s("method", &gate_facts::form_method(el, form.unchecked_ref()))
            .v("fields", fields)
            .js()
    };
    let link = el
        .closest("a[href], area[href]")
        .ok()
        .flatten()
        .and_then(|a| js::get_str(&a, "href"));
    Obj::new()
        .v("field", field_facts(el))
        .b("is_submit", is_submit)
        .v("form", form)
        .opt("link_href", link.as_deref())
        .js()
}
