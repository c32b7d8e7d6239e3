//! `read_page_content`: the page's rendered text in reading order (or its markup), paginated.
//!
//! The walk runs in slices ([`Job::step`]) over the flat tree (open shadow roots, slots,
//! same-origin iframes) with an explicit stack, so neither the page's size nor its depth can
//! block the page or overflow the stack. Hidden text is left out: `display: none`,
//! `visibility: hidden`, `aria-hidden`, `opacity: 0`, off-screen and clipped-to-nothing boxes.
//! Headings read as `## Title`, list items as `- item`, table cells are separated by ` | `.
//!
//! `format: html` walks the same tree the same way and writes markup as it goes (not one
//! `outerHTML` of a copy: on a page of 100,000 elements that single call blocks the page for
//! longer than a frame): a shadow host's content is its shadow root's, a slot's its assigned
//! nodes, an iframe's its document's `<body>`. It leaves out what the text leaves out, except
//! form fields, which stay (a form's hidden inputs are part of what it sends), and comments,
//! scripts, styles and templates; whitespace outside `pre` runs collapses to one space. No
//! secret's value is written (password, one-time code, card, hidden input such as a CSRF
//! token): not the `value` attribute of such an input, the text of such a textarea, nor the
//! selected option of such a select.

use alloc::borrow::Cow;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::Cell;
use wasm_bindgen::prelude::*;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{Document, Element};

use crate::dom;
use crate::dom::{Looked, Lookup};
use crate::js::{self, Obj};
use crate::pristine;
use crate::scope::Scope;
use crate::slices::now;
use crate::text::{Tidier, paginate, push_collapsed};
use crate::tools::{ToolErr, lookup_error, usize_arg};

/// Characters of `read_page_content` when the call gives no `max_chars`.
const DEFAULT_MAX_CHARS: usize = 4000;
/// Time a call may take in all (its slices and the page's tasks between them).
pub const TIME_BUDGET_MS: f64 = 10_000.0;
/// Text gathered at most (bytes); the rest of a larger page is read with a `selector`.
const MAX_TEXT: usize = 4_000_000;

const TEXT_SKIP: &[&str] = &[
    "script", "style", "noscript", "template", "head", "svg", "input", "select", "textarea",
    "option", "datalist", "object", "embed", "canvas",
];
const PARAGRAPHS: &[&str] = &[
    "p",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "ul",
    "ol",
    "table",
    "blockquote",
    "pre",
    "form",
    "section",
    "article",
    "header",
    "footer",
    "nav",
    "main",
    "aside",
    "dl",
    "figure",
];

/// Left out of the markup (never shown, and scripts are not content).
const HTML_SKIP: &[&str] = &["script", "style", "noscript", "template"];
/// Elements whose markup has no content and no end tag.
const VOID: &[&str] = &[
    "area", "base", "basefont", "bgsound", "br", "col", "embed", "frame", "hr", "img", "input",
    "keygen", "link", "meta", "param", "source", "track", "wbr",
];
/// Form fields: in the markup even when hidden.
const FIELDS: &[&str] = &["input", "select", "textarea"];

/// An element being read: its flat-tree children still to visit.
struct Frame {
    children: dom::Children,
    /// Pushed when the element is left (a gap of line breaks, or an end tag).
    close: Cow<'static, str>,
    /// Its text nodes are shown (`visibility: visible`).
    visible: bool,
    /// Its text keeps its whitespace (`white-space: pre*`).
    pre: bool,
    /// Markup: its text is a secret's value (a secret textarea's).
    secret_text: bool,
    /// Markup: inside a secret select (its options' `selected` is left out).
    secret_select: bool,
}

/// Why the walk stopped early, if it did.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cut {
    Time,
    Size,
}

/// The text of the last read, kept for the next pages of the same read while the page does
/// not change (a `MutationObserver` on every document and open shadow root it read).
pub struct Cache {
    selector: Option<String>,
    html: bool,
    main: bool,
    root: Element,
    /// Shared with the reads that use it, not copied (a page's markup can be megabytes: a copy
    /// would grow the heap inside one task).
    text: Rc<String>,
    cut: Option<Cut>,
    made: f64,
    watch: Watch,
}

/// How long a kept text is used at most, changes or not (styles can change without a mutation).
const CACHE_MS: f64 = 30_000.0;

/// A `MutationObserver` that marks the text as outdated on any change.
struct Watch {
    observer: JsValue,
    changed: Rc<Cell<bool>>,
    _callback: Closure<dyn FnMut()>,
}

impl Watch {
    fn new() -> Option<Self> {
        let changed = Rc::new(Cell::new(false));
        let flag = changed.clone();
        let callback = Closure::<dyn FnMut()>::new(move || flag.set(true));
        let observer = js::construct("MutationObserver", &[callback.as_ref().clone()]).ok()?;
        Some(Self {
            observer,
            changed,
            _callback: callback,
        })
    }

    fn observe(&self, target: &JsValue) {
        let options = Obj::new()
            .b("subtree", true)
            .b("childList", true)
            .b("characterData", true)
            .b("attributes", true)
            .js();
        let _ = js::call(&self.observer, "observe", &[target.clone(), options]);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = js::call(&self.observer, "disconnect", &[]);
    }
}

pub struct Job {
    html: bool,
    main: bool,
    offset: usize,
    max_chars: usize,
    selector: Option<String>,
    doc: Document,
    root: Element,
    /// The selector's element, while it is looked up in open shadow roots and frames (`root`
    /// is a placeholder until then).
    lookup: Option<Lookup>,
    stack: Vec<Frame>,
    /// The root was entered (the walk has begun).
    begun: bool,
    /// Text gathered and not yet tidied (the last lines), and the tidied text before it; the
    /// markup, for `format: html` (never tidied).
    raw: String,
    tidier: Tidier,
    started: f64,
    cut: Option<Cut>,
    /// Watches what is read, for the [`Cache`] this read leaves.
    watch: Option<Watch>,
    /// The text, when the cache had it.
    cached: Option<Rc<String>>,
    /// The whole page is hidden by a cloak on <html> or <body> (see [`Job::enter`]).
    cloaked: bool,
}

impl Job {
    pub fn new(
        doc: &Document,
        scope: &Scope,
        args: &JsValue,
        cache: &mut Option<Cache>,
    ) -> Result<Self, ToolErr> {
        let html = match js::get_str(args, "format").map(|f| f.to_ascii_lowercase()) {
            None => false,
            Some(f) if f == "text" => false,
            Some(f) if f == "html" => true,
            Some(_) => return Err(ToolErr::invalid_arguments("`format` must be text or html")),
        };
        let main = match js::get_str(args, "mode").map(|f| f.to_ascii_lowercase()) {
            None => false,
            Some(m) if m == "all" => false,
            Some(m) if m == "main" => true,
            Some(_) => {
                return Err(ToolErr::invalid_arguments(
                    "`mode` must be all (the whole page) or main (the main content only)",
                ));
            }
        };
        let offset = usize_arg(args, "offset", 0, 0)?;
        let max_chars = usize_arg(args, "max_chars", DEFAULT_MAX_CHARS, 1)?;
        let selector = js::get_str(args, "selector").filter(|s| !s.trim().is_empty());
        let mut lookup = None;
        let root: Element = match &selector {
            Some(s) => match Lookup::start(doc, scope, s) {
                Looked::Found(el) => el,
                Looked::Miss(miss) => return Err(lookup_error(s, miss)),
                Looked::Walk(walk) => {
                    lookup = Some(walk);
                    page_root(doc, scope)?
                }
            },
            None if main => main_root(doc, scope)?,
            None => page_root(doc, scope)?,
        };
        let main = main && selector.is_none();
        let started = now();
        let mut job = Self {
            html,
            main,
            offset,
            max_chars,
            selector,
            doc: doc.clone(),
            root,
            lookup,
            stack: Vec::new(),
            begun: false,
            raw: String::new(),
            tidier: Tidier::default(),
            started,
            cut: None,
            watch: None,
            cached: None,
            cloaked: false,
        };
        if job.lookup.is_none() {
            job.use_cache(cache);
        }
        Ok(job)
    }

    /// Takes the text of the last read when it is of the same root and still current; else
    /// starts watching the page for the cache this read leaves.
    fn use_cache(&mut self, cache: &mut Option<Cache>) {
        let hit = cache.as_ref().is_some_and(|c| {
            c.selector == self.selector
                && c.html == self.html
                && c.main == self.main
                && c.root == self.root
                && !c.watch.changed.get()
                && self.started - c.made < CACHE_MS
        });
        if hit {
            if let Some(c) = cache.as_ref() {
                self.cached = Some(c.text.clone()); // the `Rc`
                self.cut = c.cut;
            }
        } else {
            *cache = None;
            self.watch = Watch::new();
            if let Some(w) = &self.watch {
                w.observe(&self.doc);
            }
        }
    }

    /// Reads until `until`; the answer once the page is read (or the budget spent).
    #[inline(never)]
    pub fn step(
        &mut self,
        cache: &mut Option<Cache>,
        until: f64,
    ) -> Option<Result<JsValue, ToolErr>> {
        if let Some(lookup) = &mut self.lookup {
            match lookup.step(until)? {
                Ok(el) => {
                    self.root = el;
                    self.lookup = None;
                    self.use_cache(cache);
                }
                Err(miss) => {
                    let selector = self.selector.as_deref().unwrap_or_default();
                    return Some(Err(lookup_error(selector, miss)));
                }
            }
            if now() >= until {
                return None;
            }
        }
        if let Some(text) = &self.cached {
            return Some(Ok(self.answer(text)));
        }
        if !self.begun {
            self.begun = true;
            let root = self.root.clone();
            let entered = if self.html {
                self.enter_html(&root, false)
            } else {
                self.enter(&root)
            };
            if !entered {
                return Some(Ok(self.answer("")));
            }
        }
        let mut count = 0u32;
        while let Some(top) = self.stack.last_mut() {
            count += 1;
            if count > 1 {
                let t = now();
                if t - self.started >= TIME_BUDGET_MS {
                    self.cut = Some(Cut::Time);
                    break;
                }
                if t >= until {
                    return None;
                }
            }
            if !self.html && self.raw.len() >= 1 << 15 {
                self.tidier.feed(&mut self.raw);
            }
            if self.raw.len() + self.tidier.len() >= MAX_TEXT {
                self.cut = Some(Cut::Size);
                break;
            }
            let Some(child) = top.children.current() else {
                if let Some(done) = self.stack.pop() {
                    self.raw.push_str(&done.close);
                }
                continue;
            };
            top.children.advance();
            match child.node_type() {
                dom::TEXT_NODE => {
                    let (visible, pre) = (top.visible, top.pre);
                    if visible && !top.secret_text {
                        let text = child.text_content().unwrap_or_default();
                        if self.html {
                            push_escaped(&mut self.raw, &text, !pre, false);
                        } else if pre {
                            self.raw.push_str(&text);
                        } else {
                            push_collapsed(&mut self.raw, &text);
                        }
                    }
                }
                dom::ELEMENT_NODE => {
                    let el: Element = child.unchecked_into();
                    if self.html {
                        let secret_select = top.secret_select;
                        self.enter_html(&el, secret_select);
                    } else {
                        self.enter(&el);
                    }
                }
                _ => {}
            }
        }
        // Cut short: the elements still open are closed (the markup stays well formed).
        while let Some(open) = self.stack.pop() {
            self.raw.push_str(&open.close);
        }
        let text = if self.html {
            core::mem::take(&mut self.raw)
        } else {
            core::mem::take(&mut self.tidier).finish(&self.raw)
        };
        self.raw = String::new();
        let answer = self.answer(&text);
        if let Some(watch) = self.watch.take() {
            *cache = Some(Cache {
                selector: self.selector.clone(),
                html: self.html,
                main: self.main,
                root: self.root.clone(),
                text: Rc::new(text),
                cut: self.cut,
                made: self.started,
                watch,
            });
        }
        Some(Ok(answer))
    }

    /// Starts reading an element: pushes its opening and a frame for its children, unless it
    /// is not shown. `false` when it was skipped.
    #[inline(never)]
    fn enter(&mut self, el: &Element) -> bool {
        let tag = dom::tag(el);
        if TEXT_SKIP.contains(&tag.as_str())
            || dom::is_own_host(el)
            || js::attribute_is(el, "aria-hidden", "true")
        {
            return false;
        }
        if tag == "br" {
            self.raw.push('\n');
            return false;
        }
        let Some(style) = dom::computed_style(el) else {
            return false;
        };
        let display = dom::style_prop(&style, "display");
        if !self.shown(el, &tag, &style, display == "none") {
            return false;
        }
        let inline = display.starts_with("inline")
            || display == "contents"
            || display == "math"
            || display.starts_with("ruby")
            || display == "table-cell";
        let gap = if PARAGRAPHS.contains(&tag.as_str()) {
            "\n\n\n"
        } else if inline {
            ""
        } else {
            "\n"
        };
        self.raw.push_str(gap);
        let level = match tag.as_str() {
            "h1" => 1,
            "h2" => 2,
            "h3" => 3,
            "h4" => 4,
            "h5" => 5,
            "h6" => 6,
            _ => 0,
        };
        for _ in 0..level {
            self.raw.push('#');
        }
        if level > 0 {
            self.raw.push(' ');
        }
        if display == "list-item" {
            self.raw.push_str("- ");
        }
        if display == "table-cell" && !self.raw.ends_with('\n') && !self.raw.is_empty() {
            let trimmed = self.raw.trim_end_matches(' ').len();
            self.raw.truncate(trimmed);
            self.raw.push_str(" | ");
        }
        if tag == "img"
            && let Some(alt) = dom::attr_text(el, "alt")
        {
            push_collapsed(&mut self.raw, " [image: ");
            push_collapsed(&mut self.raw, &alt);
            self.raw.push_str("] ");
        }
        self.watch_inside(el);
        self.stack.push(Frame {
            children: dom::flat_children_of(el),
            close: Cow::Borrowed(gap),
            visible: self.cloaked || js::style_is(&style, "visibility", "visible"),
            pre: keeps_whitespace(&style),
            secret_text: false,
            secret_select: false,
        });
        true
    }

    /// The element is shown (`display_none`: its computed `display` is `none`): not
    /// `display: none`, not transparent, not a hidden box. Notes a cloak on the whole page.
    fn shown(
        &mut self,
        el: &Element,
        tag: &str,
        style: &web_sys::CssStyleDeclaration,
        display_none: bool,
    ) -> bool {
        // A cloak on the whole page (`opacity: 0` or `visibility: hidden` on <html> or <body>
        // until a script reveals it: anti-flicker snippets, fade-ins) does not hide its text.
        let page_level = tag == "body" || tag == "html";
        if display_none || (!page_level && js::style_is(style, "opacity", "0")) {
            return false;
        }
        if page_level && !js::style_is(style, "visibility", "visible") {
            self.cloaked = true;
        }
        !hidden_box(el, style)
    }

    /// Watches the element's shadow root or frame document, for the cache.
    fn watch_inside(&self, el: &Element) {
        if let Some(watch) = &self.watch {
            if let Some(root) = el.shadow_root() {
                watch.observe(&root);
            } else if let Some(doc) = dom::frame_document(el) {
                watch.observe(&doc);
            }
        }
    }

    /// Starts writing an element's markup: its start tag, and a frame for its children (none
    /// for a void element), unless it is not shown (a form field always is). `in_secret_select`:
    /// its parent is (in) a secret select. `false` when it was skipped.
    #[inline(never)]
    fn enter_html(&mut self, el: &Element, in_secret_select: bool) -> bool {
        let tag = dom::tag(el);
        if HTML_SKIP.contains(&tag.as_str()) || dom::is_own_host(el) {
            return false;
        }
        let field = FIELDS.contains(&tag.as_str());
        let style = dom::computed_style(el);
        if !field {
            if js::attribute_is(el, "aria-hidden", "true") {
                return false;
            }
            let Some(style) = &style else {
                return false;
            };
            let display_none = js::style_is(style, "display", "none");
            if !self.shown(el, &tag, style, display_none) {
                return false;
            }
        }
        let secret = field && crate::secret::secret_kind(el, None, false).is_some();
        self.raw.push('<');
        self.raw.push_str(&tag);
        let names = el.get_attribute_names();
        for i in 0..names.length() {
            let name_value = names.get(i);
            let Some(name) = name_value.as_string() else {
                continue;
            };
            if (secret && name == "value") || (in_secret_select && name == "selected") {
                continue;
            }
            let value = js::attribute(el, &name_value).unwrap_or_default();
            self.raw.push(' ');
            self.raw.push_str(&name);
            self.raw.push_str("=\"");
            push_escaped(&mut self.raw, &value, false, true);
            self.raw.push('"');
        }
        self.raw.push('>');
        if VOID.contains(&tag.as_str()) {
            return true;
        }
        self.watch_inside(el);
        let (visible, pre) = style.as_ref().map_or((true, false), |style| {
            (
                self.cloaked || js::style_is(style, "visibility", "visible"),
                keeps_whitespace(style),
            )
        });
        self.stack.push(Frame {
            children: dom::flat_children_of(el),
            close: Cow::Owned(format!("</{tag}>")),
            visible,
            pre,
            secret_text: secret && tag == "textarea",
            secret_select: in_secret_select || (secret && tag == "select"),
        });
        true
    }

    #[inline(never)]
    fn answer(&self, full: &str) -> JsValue {
        let page = paginate(full, self.offset, self.max_chars);
        let offset = self.offset;
        let mut out = Obj::new()
            .s("format", if self.html { "html" } else { "text" })
            .opt("selector", self.selector.as_deref())
            .n("offset", offset as f64)
            .n("returned_chars", page.returned as f64)
            .n("total_chars", page.total as f64)
            .n("remaining_chars", page.remaining as f64);
        if self.main {
            out = out.s("mode", "main");
        }
        let next = offset.min(page.total) + page.returned;
        let mut note = if offset > page.total {
            format!(
                "offset {offset} is past the end: the content has {} characters",
                page.total
            )
        } else if page.remaining > 0 {
            out = out.n("next_offset", next as f64);
            format!(
                "{} more characters: call read_page_content again with offset={next} to read on",
                page.remaining
            )
        } else {
            String::from("this is the end of the content")
        };
        if let Some(cut) = self.cut {
            out = out.b("partial", true);
            note.push_str(match cut {
                Cut::Time => {
                    "; the page is too large to read in full within the time budget: the text stops where reading stopped. Read a part of the page with a `selector` to get the rest"
                }
                Cut::Size => {
                    "; the page's text is larger than can be read at once: the text stops there. Read a part of the page with a `selector` to get the rest"
                }
            });
        }
        out.s("note", &note).s("content", &page.content).js()
    }
}

/// The scope's element; else `<body>`, or the document element.
fn page_root(doc: &Document, scope: &Scope) -> Result<Element, ToolErr> {
    if let Some(root) = scope.root() {
        return Ok(root.clone());
    }
    match doc.body() {
        Some(body) => Ok(body.into()),
        None => doc
            .document_element()
            .ok_or_else(|| ToolErr::unavailable("the page has no content")),
    }
}

/// The page's main content: `<main>` or `role=main`, else its largest `<article>`, else the
/// whole page (with a scope: the same, looked for inside the scope's element).
fn main_root(doc: &Document, scope: &Scope) -> Result<Element, ToolErr> {
    let within: JsValue = match scope.root() {
        Some(root) => {
            if pristine::matches(root, "main, [role=main]").unwrap_or(false) {
                return Ok(root.clone());
            }
            root.into()
        }
        None => doc.into(),
    };
    if let Ok(Some(main)) = pristine::query(&within, "main, [role=main]") {
        return Ok(main);
    }
    if let Ok(list) = pristine::query_all(&within, "article") {
        let mut best: Option<(usize, Element)> = None;
        for i in 0..list.length().min(200) {
            if let Some(el) = list.item(i).and_then(|n| dom::as_element(&n)) {
                let len = el.text_content().map_or(0, |t| t.len());
                if best.as_ref().is_none_or(|(l, _)| len > *l) {
                    best = Some((len, el));
                }
            }
        }
        if let Some((_, el)) = best {
            return Ok(el);
        }
    }
    page_root(doc, scope)
}

/// `white-space: pre*` or `break-spaces` (most elements are `normal`: compared in JS first).
fn keeps_whitespace(style: &web_sys::CssStyleDeclaration) -> bool {
    if js::style_is(style, "white-space", "normal") {
        return false;
    }
    let ws = dom::style_prop(style, "white-space");
    ws.starts_with("pre") || ws == "break-spaces"
}

/// A box that shows nothing: clipped to (nearly) nothing, or placed off the page (the
/// "visually hidden" patterns).
fn hidden_box(el: &Element, style: &web_sys::CssStyleDeclaration) -> bool {
    let positioned =
        js::style_is(style, "position", "absolute") || js::style_is(style, "position", "fixed");
    let clips = !js::style_is(style, "overflow-x", "visible")
        || !js::style_is(style, "overflow-y", "visible");
    if !positioned && !clips {
        return false;
    }
    let rect = el.get_bounding_client_rect();
    if clips && rect.width() <= 1.0 && rect.height() <= 1.0 {
        return true;
    }
    if positioned {
        let win = dom::window_of(el);
        let (sx, sy) = win.map_or((0.0, 0.0), |w| {
            (w.scroll_x().unwrap_or(0.0), w.scroll_y().unwrap_or(0.0))
        });
        if rect.right() + sx <= 0.0 || rect.bottom() + sy <= 0.0 {
            return true;
        }
    }
    false
}

/// Appends `text` as markup: `&`, `<`, `>` and no-break spaces as character references (and
/// `"` in an attribute value, `attr`); with `collapse`, runs of HTML whitespace as one space,
/// none after `out`'s own trailing space.
fn push_escaped(out: &mut String, text: &str, collapse: bool, attr: bool) {
    let mut space = out.ends_with(' ');
    for c in text.chars() {
        if collapse && matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0c') {
            if !space {
                out.push(' ');
                space = true;
            }
            continue;
        }
        space = false;
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\u{a0}' => out.push_str("&nbsp;"),
            '"' if attr => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::push_escaped;
    use alloc::string::String;

    #[test]
    fn markup_is_escaped_and_collapsed() {
        let mut out = String::from("<p>");
        push_escaped(&mut out, "  a <b> &\u{a0}\n\t c  ", true, false);
        assert_eq!(out, "<p> a &lt;b&gt; &amp;&nbsp; c ");
        let mut out = String::from("x ");
        push_escaped(&mut out, " \"q\"\n", true, true);
        assert_eq!(out, "x &quot;q&quot; ");
        let mut out = String::new();
        push_escaped(&mut out, "a  \"b\"\n c", false, false);
        assert_eq!(out, "a  \"b\"\n c");
    }
}
