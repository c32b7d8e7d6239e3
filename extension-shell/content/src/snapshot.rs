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
    text: String,
    kind: Kind,
    candidate: Candidate,
}

struct Walk<'a> {
    refs: &'a mut Refs,
    lines: Vec<Line>,
    view_w: f64,
    view_h: f64,
    focused: Option<Element>,
    page_origin: String,
}

/// Runs `snapshot_page`.
pub fn snapshot(
    refs: &mut Refs,
    doc: &Document,
    max_tokens: Option<u64>,
) -> Result<JsValue, ToolErr> {
    refs.prune();
    let win = doc
        .default_view()
        .ok_or_else(|| ToolErr::unavailable("the page has no window"))?;
    let size = |v: Result<JsValue, JsValue>| v.ok().and_then(|v| v.as_f64()).unwrap_or(0.0);
    let mut walk = Walk {
        refs,
        lines: Vec::new(),
        view_w: size(win.inner_width()),
        view_h: size(win.inner_height()),
        focused: dom::deep_active_element(doc),
        page_origin: win.location().origin().unwrap_or_default(),
    };
    let root: Node = match doc.body() {
        Some(body) => body.into(),
        None => doc
            .document_element()
            .ok_or_else(|| ToolErr::unavailable("the page has no document element"))?
            .into(),
    };
    walk.walk(&root, None, 0, (0.0, 0.0));
    let lines = walk.lines;

    let max_tokens = max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    let budget = usize::try_from(max_tokens.saturating_mul(CHARS_PER_TOKEN)).unwrap_or(usize::MAX);
    let candidates: Vec<Candidate> = lines.iter().map(|l| l.candidate.clone()).collect();
    let kept = fit(&candidates, budget);

    let mut outline = String::new();
    let mut shown = 0u32;
    let mut left = [0u32; 5]; // headings, links, buttons, fields, other
    for (line, keep) in lines.iter().zip(&kept) {
        if *keep {
            for _ in 0..line.depth {
                outline.push_str("  ");
            }
            outline.push_str(&line.text);
            outline.push('\n');
            if !line.candidate.structural {
                shown += 1;
            }
        } else if !line.candidate.structural {
            let slot = match line.kind {
                Kind::Heading => 0,
                Kind::Link => 1,
                Kind::Button => 2,
                Kind::Field => 3,
                _ => 4,
            };
            left[slot] += 1;
        }
    }
    let total_left: u32 = left.iter().sum();
    let mut result = Obj::new()
        .s("title", &doc.title())
        .s("url", &win.location().href().unwrap_or_default())
        .s("outline", outline.trim_end())
        .n("elements_shown", f64::from(shown))
        .b("complete", total_left == 0);
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
        result = result.v("left_out", summary.js()).s(
            "note",
            &format!(
                "{} left out to fit max_tokens={max_tokens} (elements in view come first). Scroll \
                 and call snapshot_page again, or call it with a larger max_tokens.",
                parts.join(", ")
            ),
        );
    }
    if shown == 0 && total_left == 0 {
        result = result.s(
            "note",
            "the page has no landmarks, headings or interactive elements",
        );
    }
    Ok(result.js())
}

const SKIP_TAGS: &[&str] = &[
    "script", "style", "noscript", "template", "head", "meta", "link", "svg", "math", "canvas",
];

impl Walk<'_> {
    fn walk(&mut self, node: &Node, parent: Option<usize>, depth: usize, offset: (f64, f64)) {
        for child in dom::flat_children(node) {
            let Some(el) = dom::as_element(&child) else {
                continue;
            };
            let tag = dom::tag(&el);
            if SKIP_TAGS.contains(&tag.as_str()) || dom::is_own_host(&el) {
                continue;
            }
            if dom::attr(&el, "aria-hidden").as_deref() == Some("true") {
                continue;
            }
            let Some(style) = dom::computed_style(&el) else {
                continue;
            };
            if dom::style_prop(&style, "display") == "none" {
                continue;
            }
            let visible = dom::style_prop(&style, "visibility") == "visible";
            let mut child_parent = parent;
            let mut child_depth = depth;
            if visible && let Some(role) = dom::role_of(&el) {
                let index = self.lines.len();
                let structural = matches!(role.kind, Kind::Landmark | Kind::Frame);
                let text = self.line_text(&el, &role);
                let rect = el.get_bounding_client_rect();
                let (left, top) = (rect.left() + offset.0, rect.top() + offset.1);
                let in_view = rect.width() + rect.height() > 0.0
                    && left < self.view_w
                    && top < self.view_h
                    && left + rect.width() > 0.0
                    && top + rect.height() > 0.0;
                self.lines.push(Line {
                    depth,
                    candidate: Candidate {
                        parent,
                        cost: text.len() + 2 * depth + 1,
                        in_view,
                        structural,
                    },
                    text,
                    kind: role.kind,
                });
                if structural {
                    child_parent = Some(index);
                    child_depth = depth + 1;
                }
            }
            let child_offset = if dom::frame_document(&el).is_some() {
                let rect = el.get_bounding_client_rect();
                (offset.0 + rect.left(), offset.1 + rect.top())
            } else {
                offset
            };
            self.walk(&el, child_parent, child_depth, child_offset);
        }
    }

    fn line_text(&mut self, el: &Element, role: &dom::Role) -> String {
        let number = self.refs.ref_for(el);
        let name = dom::accessible_name(el, Some(&role.name));
        let mut line = format!("- {}", role.name);
        if !name.is_empty() {
            line.push(' ');
            line.push_str(&quoted(&name));
        }
        line.push_str(&format!(" [ref=e{number}]"));
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
            if dom::is_password(el) {
                // Never the value of a password field; only whether it holds something.
                flag("password");
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
        line
    }
}

/// The current value of a field (not for password fields: callers check first).
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
