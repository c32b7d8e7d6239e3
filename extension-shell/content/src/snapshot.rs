//! `snapshot_page`: the page as a compact outline of landmarks, headings and interactive
//! elements, each with a ref (`e12`) kept in an in-memory map (the page sees no attribute).

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{Document, Element, Node};

use crate::dom::{self, Kind};
use crate::js::{self, Obj};
use crate::text::{Candidate, clip, fit, quoted};
use crate::tools::ToolErr;

/// Token budget when the model gives none.
pub const DEFAULT_MAX_TOKENS: u64 = 2000;
/// Characters per token assumed when fitting the outline (outlines tokenise densely).
const CHARS_PER_TOKEN: u64 = 3;
const VALUE_MAX: usize = 60;

/// Element refs: numbers handed out once and never reused, so an old ref never names another
/// element. Held in memory only; the page cannot see or forge them.
pub struct Refs {
    by_number: BTreeMap<u32, Element>,
    by_element: js_sys::Map,
    next: u32,
}

impl Refs {
    pub fn new() -> Self {
        Self {
            by_number: BTreeMap::new(),
            by_element: js_sys::Map::new(),
            next: 1,
        }
    }

    /// The ref of `el`, handing out a new one when it has none.
    pub fn ref_for(&mut self, el: &Element) -> u32 {
        if let Some(n) = self.by_element.get(el).as_f64() {
            return n as u32;
        }
        let n = self.next;
        self.next += 1;
        self.by_number.insert(n, el.clone());
        self.by_element.set(el, &JsValue::from_f64(f64::from(n)));
        n
    }

    /// Forgets elements that left the page (their refs stay known as stale).
    pub fn prune(&mut self) {
        let gone: Vec<u32> = self
            .by_number
            .iter()
            .filter(|(_, el)| !dom::attached(el))
            .map(|(n, _)| *n)
            .collect();
        for n in gone {
            if let Some(el) = self.by_number.remove(&n) {
                self.by_element.delete(&el);
            }
        }
    }

    /// The element of ref `name` (`e12`): stale when it left the page, not found when the ref was
    /// never handed out.
    pub fn resolve(&self, name: &str) -> Result<Element, ToolErr> {
        let number = name
            .strip_prefix('e')
            .and_then(|digits| digits.parse::<u32>().ok());
        let Some(number) = number else {
            return Err(ToolErr::not_found(format!(
                "{name} is not a ref: refs look like e12; call snapshot_page to get them"
            )));
        };
        match self.by_number.get(&number) {
            Some(el) if dom::attached(el) => Ok(el.clone()),
            Some(_) => Err(stale(name)),
            None if number < self.next => Err(stale(name)),
            None => Err(ToolErr::not_found(format!(
                "there is no element with ref {name}; call snapshot_page and use one of its refs"
            ))),
        }
    }
}

fn stale(name: &str) -> ToolErr {
    ToolErr::stale_ref(format!(
        "ref {name} is gone: the element was removed or replaced after the snapshot. Call \
         snapshot_page again for fresh refs."
    ))
}

struct Line {
    depth: usize,
    /// `- role "name"`; the ref goes between it and `flags`.
    head: String,
    flags: String,
    kind: Kind,
    candidate: Candidate,
    element: Element,
}

/// An element whose flat-tree children are being walked.
struct Frame {
    children: dom::Children,
    parent: Option<usize>,
    depth: usize,
    offset: (f64, f64),
}

/// Time a snapshot may take in all (its slices and the page's tasks between them).
pub const TIME_BUDGET_MS: f64 = 10_000.0;
/// Characters per ref (` [ref=e123]`) when fitting: refs are handed out to shown lines only.
const REF_COST: usize = 12;

/// A `snapshot_page` call in progress.
pub struct Job {
    max_tokens: u64,
    budget: usize,
    doc: Document,
    lines: Vec<Line>,
    /// Cost of the lines kept for fitting; past `4 × budget`, elements out of view are only
    /// counted (`counted`): they could not be shown anyway.
    kept_cost: usize,
    counted: [u32; 5],
    stack: Vec<Frame>,
    view_w: f64,
    view_h: f64,
    focused: Option<Element>,
    page_origin: String,
    started: f64,
    visited: u32,
    timed_out: bool,
    /// The walk is over (or cut): what is left is making the outline.
    walked: bool,
}

fn slot(kind: Kind) -> usize {
    match kind {
        Kind::Heading => 0,
        Kind::Link => 1,
        Kind::Button => 2,
        Kind::Field => 3,
        _ => 4,
    }
}

const SKIP_TAGS: &[&str] = &[
    "script", "style", "noscript", "template", "head", "meta", "link", "svg", "math", "canvas",
];

impl Job {
    /// A snapshot of the page, or (`scope`) of one element and its subtree.
    pub fn new(
        doc: &Document,
        scope: Option<&Element>,
        max_tokens: Option<u64>,
    ) -> Result<Self, ToolErr> {
        let win = doc
            .default_view()
            .ok_or_else(|| ToolErr::unavailable("the page has no window"))?;
        let size = |v: Result<JsValue, JsValue>| v.ok().and_then(|v| v.as_f64()).unwrap_or(0.0);
        let children = match scope {
            // The scope's element is listed too (it may be a landmark or a form).
            Some(root) => dom::Children::Nodes(alloc::vec![root.clone().into()], 0),
            None => {
                let root: Node = match doc.body() {
                    Some(body) => body.into(),
                    None => doc
                        .document_element()
                        .ok_or_else(|| ToolErr::unavailable("the page has no document element"))?
                        .into(),
                };
                dom::flat_children_of(&root)
            }
        };
        let max_tokens = max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        let budget =
            usize::try_from(max_tokens.saturating_mul(CHARS_PER_TOKEN)).unwrap_or(usize::MAX);
        Ok(Self {
            max_tokens,
            budget,
            doc: doc.clone(),
            lines: Vec::new(),
            kept_cost: 0,
            counted: [0; 5],
            stack: alloc::vec![Frame {
                children,
                parent: None,
                depth: 0,
                offset: (0.0, 0.0),
            }],
            view_w: size(win.inner_width()),
            view_h: size(win.inner_height()),
            focused: dom::deep_active_element(doc),
            page_origin: win.location().origin().unwrap_or_default(),
            started: crate::slices::now(),
            visited: 0,
            timed_out: false,
            walked: false,
        })
    }

    /// Walks until `until`; the answer once the page is walked (or the budget spent).
    #[inline(never)]
    pub fn step(&mut self, refs: &mut Refs, until: f64) -> Option<Result<JsValue, ToolErr>> {
        let mut count = 0u32;
        while let Some(top) = self.stack.last_mut() {
            let Some(child) = top.children.current() else {
                self.stack.pop();
                continue;
            };
            // The clock after every element: one element's name can cost a few hundred nodes.
            count += 1;
            if count > 1 {
                let t = crate::slices::now();
                if t - self.started >= TIME_BUDGET_MS {
                    self.timed_out = true;
                    break;
                }
                if t >= until {
                    return None;
                }
            }
            let Some(top) = self.stack.last_mut() else {
                break;
            };
            top.children.advance();
            let (parent, depth, offset) = (top.parent, top.depth, top.offset);
            self.visit(&child, parent, depth, offset);
        }
        // The outline is made in a slice of its own when the walk used half of this one.
        if !self.walked {
            self.walked = true;
            if crate::slices::now() >= until - crate::slices::SLICE_MS / 2.0 {
                return None;
            }
        }
        Some(Ok(self.finish(refs)))
    }

    #[inline(never)]
    fn visit(&mut self, child: &Node, parent: Option<usize>, depth: usize, offset: (f64, f64)) {
        let Some(el) = dom::as_element(child) else {
            return;
        };
        self.visited += 1;
        let tag = dom::tag(&el);
        if SKIP_TAGS.contains(&tag.as_str()) || dom::is_own_host(&el) {
            return;
        }
        if js::attribute_is(&el, "aria-hidden", "true") {
            return;
        }
        let Some(style) = dom::computed_style(&el) else {
            return;
        };
        if js::style_is(&style, "display", "none") {
            return;
        }
        let visible = js::style_is(&style, "visibility", "visible");
        let mut child_parent = parent;
        let mut child_depth = depth;
        if visible && let Some(role) = dom::role_of(&el) {
            let structural = matches!(role.kind, Kind::Landmark | Kind::Frame);
            let rect = el.get_bounding_client_rect();
            let (left, top) = (rect.left() + offset.0, rect.top() + offset.1);
            let in_view = rect.width() + rect.height() > 0.0
                && left < self.view_w
                && top < self.view_h
                && left + rect.width() > 0.0
                && top + rect.height() > 0.0;
            if !structural && !in_view && self.kept_cost > self.budget.saturating_mul(4) {
                // Could not be shown: only counted.
                self.counted[slot(role.kind)] += 1;
            } else {
                let index = self.lines.len();
                let (head, flags) = self.line_text(&el, &role);
                let cost = head.len() + flags.len() + REF_COST + 2 * depth + 1;
                if !structural {
                    self.kept_cost += cost;
                }
                self.lines.push(Line {
                    depth,
                    candidate: Candidate {
                        parent,
                        cost,
                        in_view,
                        structural,
                    },
                    head,
                    flags,
                    kind: role.kind,
                    element: el.clone(),
                });
                if structural {
                    child_parent = Some(index);
                    child_depth = depth + 1;
                }
            }
        }
        let child_offset = if dom::frame_document(&el).is_some() {
            let rect = el.get_bounding_client_rect();
            (offset.0 + rect.left(), offset.1 + rect.top())
        } else {
            offset
        };
        let children = dom::flat_children_of(&el);
        if !children.is_empty() {
            self.stack.push(Frame {
                children,
                parent: child_parent,
                depth: child_depth,
                offset: child_offset,
            });
        }
    }

    #[inline(never)]
    fn finish(&mut self, refs: &mut Refs) -> JsValue {
        let doc = self.doc.clone();
        let lines = core::mem::take(&mut self.lines);
        self.stack = Vec::new();
        let max_tokens = self.max_tokens;
        let candidates: Vec<Candidate> = lines.iter().map(|l| l.candidate.clone()).collect();
        let kept = fit(&candidates, self.budget);

        let mut outline = String::new();
        let mut shown = 0u32;
        let mut left = self.counted; // headings, links, buttons, fields, other
        for (line, keep) in lines.iter().zip(&kept) {
            if *keep {
                for _ in 0..line.depth {
                    outline.push_str("  ");
                }
                outline.push_str(&line.head);
                let number = refs.ref_for(&line.element);
                outline.push_str(&format!(" [ref=e{number}]"));
                outline.push_str(&line.flags);
                outline.push('\n');
                if !line.candidate.structural {
                    shown += 1;
                }
            } else if !line.candidate.structural {
                left[slot(line.kind)] += 1;
            }
        }
        let total_left: u32 = left.iter().sum();
        let href = doc
            .default_view()
            .and_then(|w| w.location().href().ok())
            .unwrap_or_default();
        let mut result = Obj::new()
            .s("title", &doc.title())
            .s("url", &href)
            .s("outline", outline.trim_end())
            .n("elements_shown", f64::from(shown))
            .b("complete", total_left == 0 && !self.timed_out);
        let mut notes: Vec<String> = Vec::new();
        if total_left > 0 {
            let names = ["headings", "links", "buttons", "fields", "other elements"];
            let mut summary = Obj::new();
            let mut parts: Vec<String> = Vec::new();
            for (count, name) in left.iter().zip(names) {
                if *count > 0 {
                    summary = summary.n(name, f64::from(*count));
                    parts.push(format!("{count} {name}"));
                }
            }
            result = result.v("left_out", summary.js());
            notes.push(format!(
                "{} left out to fit max_tokens={max_tokens} (elements in view come first). Scroll \
                 and call snapshot_page again, or call it with a larger max_tokens.",
                parts.join(", ")
            ));
        }
        if self.timed_out {
            result = result.b("partial", true);
            notes.push(format!(
                "The page is too large to outline within {} s: this outline covers the first \
                 {} elements in page order; the rest of the page was not looked at. Scroll to \
                 the part you need and call snapshot_page again, or use read_page_content with \
                 a selector.",
                (TIME_BUDGET_MS / 1000.0) as u32,
                self.visited
            ));
        }
        if shown == 0 && total_left == 0 && !self.timed_out {
            notes.push(String::from(
                "the page has no landmarks, headings or interactive elements",
            ));
        }
        if !notes.is_empty() {
            result = result.s("note", &notes.join(" "));
        }
        result.js()
    }

    /// The line of an element: `- role "name"`, and the flags that follow its ref.
    #[inline(never)]
    fn line_text(&mut self, el: &Element, role: &dom::Role) -> (String, String) {
        let name = dom::accessible_name(el, Some(&role.name));
        let mut head = format!("- {}", role.name);
        if !name.is_empty() {
            head.push(' ');
            head.push_str(&quoted(&name));
        }
        let mut line = String::new();
        let tag = dom::tag(el);
        let mut flag = |text: &str| {
            line.push(' ');
            line.push_str(text);
        };
        if role.kind == Kind::Heading {
            let level = tag
                .strip_prefix('h')
                .and_then(|d| d.parse::<u8>().ok())
                .map(|n| format!("{n}"))
                .or_else(|| dom::attr_text(el, "aria-level"))
                .unwrap_or_else(|| String::from("2"));
            flag(&format!("level={level}"));
        }
        if matches!(role.kind, Kind::Button | Kind::Field | Kind::Link) && dom::is_disabled(el) {
            flag("disabled");
        }
        let is_input = tag == "input";
        let input_type = if is_input {
            dom::input_type(el)
        } else {
            String::new()
        };
        if input_type == "checkbox" || input_type == "radio" {
            flag(if js::get_true(el, "checked") {
                "checked"
            } else {
                "unchecked"
            });
        } else if let Some(checked) = dom::attr(el, "aria-checked") {
            flag(if checked == "true" {
                "checked"
            } else if checked == "mixed" {
                "mixed"
            } else {
                "unchecked"
            });
        }
        if let Some(expanded) = dom::attr(el, "aria-expanded") {
            flag(if expanded == "true" {
                "expanded"
            } else {
                "collapsed"
            });
        } else if tag == "summary"
            && let Some(details) = el.parent_element()
        {
            flag(if details.has_attribute("open") {
                "expanded"
            } else {
                "collapsed"
            });
        }
        if dom::attr(el, "aria-pressed").as_deref() == Some("true") {
            flag("pressed");
        }
        if dom::attr(el, "aria-selected").as_deref() == Some("true") {
            flag("selected");
        }
        if role.kind == Kind::Field {
            if el.has_attribute("required")
                || dom::attr(el, "aria-required").as_deref() == Some("true")
            {
                flag("required");
            }
            if el.has_attribute("readonly")
                || dom::attr(el, "aria-readonly").as_deref() == Some("true")
            {
                flag("readonly");
            }
        }
        if self.focused.as_ref() == Some(el) {
            flag("focused");
        }
        if role.kind == Kind::Field && input_type != "checkbox" && input_type != "radio" {
            if let Some(kind) =
                crate::secret::secret_kind(el, (!name.is_empty()).then_some(name.as_str()), false)
            {
                // Never the value of a secret field (password, one-time code, card, hidden);
                // only its kind and whether it holds something.
                flag(crate::secret::flag(kind));
                if js::get_str(el, "value").is_some_and(|v| !v.is_empty()) {
                    flag("filled");
                }
            } else if let Some(value) = field_value(el, &tag)
                && !value.is_empty()
            {
                flag(&format!("value={}", quoted(&clip(&value, VALUE_MAX))));
            }
        }
        if role.kind == Kind::Link
            && let Some(href) = js::get_str(el, "href")
        {
            let short = match href.strip_prefix(self.page_origin.as_str()) {
                Some(path) if !self.page_origin.is_empty() => path,
                _ => href.as_str(),
            };
            flag(&format!("url={}", clip(short, VALUE_MAX)));
        }
        (head, line)
    }
}

/// The current value of a field (not for secret fields: callers check first).
fn field_value(el: &Element, tag: &str) -> Option<String> {
    match tag {
        "input" | "textarea" => js::get_str(el, "value").map(|v| crate::text::one_line(&v)),
        "select" => {
            let options = js::get(el, "selectedOptions");
            if options.is_undefined() || options.is_null() {
                return None;
            }
            let list: web_sys::HtmlCollection = options.unchecked_into();
            let mut texts: Vec<String> = Vec::new();
            for i in 0..list.length() {
                if let Some(option) = list.item(i) {
                    texts.push(crate::text::one_line(
                        &option.text_content().unwrap_or_default(),
                    ));
                }
            }
            Some(texts.join(", "))
        }
        _ => {
            let html: &web_sys::HtmlElement = el.unchecked_ref();
            if html.is_content_editable() {
                let mut text = String::new();
                dom::subtree_text(el, &mut text, 200);
                Some(crate::text::one_line(&text))
            } else {
                None
            }
        }
    }
}
