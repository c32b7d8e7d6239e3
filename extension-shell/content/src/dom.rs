//! DOM helpers shared by the tools: the flat tree (open shadow roots, slots, same-origin
//! iframes), visibility, accessible names and roles, element descriptions.
//!
//! Nodes of a same-origin iframe belong to another JavaScript realm, so `instanceof` (what
//! `dyn_into` uses) fails for them: node kinds are told apart by `nodeType` and `localName`, and
//! casts are unchecked after that test.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use alloc::{format, vec};
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{CssStyleDeclaration, Document, Element, HtmlElement, Node, Window};

use crate::js::{self, Obj};
use crate::pristine;
use crate::scope::{Refusal, Scope};
use crate::text::{clip, one_line, push_collapsed};

pub const ELEMENT_NODE: u16 = 1;
pub const TEXT_NODE: u16 = 3;

/// Longest accessible name shown.
pub const NAME_MAX: usize = 80;

/// The node as an element, if it is one.
pub fn as_element(node: &Node) -> Option<Element> {
    (node.node_type() == ELEMENT_NODE).then(|| node.clone().unchecked_into())
}

/// Lowercase tag name (`localName`, which is already lowercase for HTML elements).
pub fn tag(el: &Element) -> String {
    el.local_name()
}

/// Our own host element (and in the `embedded` build the widget's element): never listed, read
/// or acted on.
pub fn is_own_host(el: &Element) -> bool {
    js::local_name_is(el, crate::HOST_TAG)
        || (cfg!(feature = "embedded") && js::local_name_is(el, crate::WIDGET_TAG))
}

/// The window the element lives in (an iframe's for elements inside it).
pub fn window_of(el: &Element) -> Option<Window> {
    el.owner_document()?.default_view()
}

pub fn computed_style(el: &Element) -> Option<CssStyleDeclaration> {
    window_of(el)?.get_computed_style(el).ok().flatten()
}

pub fn style_prop(style: &CssStyleDeclaration, name: &'static str) -> String {
    js::style_value(style, name).as_string().unwrap_or_default()
}

/// The same-origin document inside an `<iframe>`/`<frame>`, if any.
pub fn frame_document(el: &Element) -> Option<Document> {
    if !js::local_name_is(el, "iframe") && !js::local_name_is(el, "frame") {
        return None;
    }
    let doc = js::get(el, "contentDocument");
    (!doc.is_null() && !doc.is_undefined()).then(|| doc.unchecked_into())
}

/// The children of a node in the flat tree, read one at a time (a page may give an element
/// tens of thousands of children: they are not copied out at once).
///
/// A live `childNodes` list read by index, not `firstChild`/`nextSibling`: on a page of
/// 100,000 elements the sibling chain made the garbage collector's pause during a read
/// ~10 ms longer (36-38 ms against 25-28 ms, headless Chromium; the pause lands inside a slice).
pub enum Children {
    /// A live `childNodes` list and the next index.
    List(web_sys::NodeList, u32),
    /// A list made here (a slot's assigned nodes, a frame's body) and the next index.
    Nodes(Vec<Node>, usize),
}

impl Children {
    /// The child at the cursor, if any are left.
    pub fn current(&self) -> Option<Node> {
        match self {
            Self::List(list, i) => list.item(*i),
            Self::Nodes(nodes, i) => nodes.get(*i).cloned(),
        }
    }

    /// Moves past the child at the cursor.
    pub fn advance(&mut self) {
        match self {
            Self::List(_, i) => *i = i.saturating_add(1),
            Self::Nodes(_, i) => *i += 1,
        }
    }

    /// No child is left.
    pub fn is_empty(&self) -> bool {
        match self {
            Self::List(list, i) => *i >= list.length(),
            Self::Nodes(nodes, i) => *i >= nodes.len(),
        }
    }
}

/// The children of `node` in the flat tree: an open shadow root's children instead of the
/// host's, a slot's assigned nodes, a same-origin iframe's `<body>`.
pub fn flat_children_of(node: &Node) -> Children {
    if let Some(el) = as_element(node) {
        if let Some(doc) = frame_document(&el) {
            let inner: Option<Node> = match doc.body() {
                Some(body) => Some(body.into()),
                None => doc.document_element().map(Into::into),
            };
            return Children::Nodes(inner.into_iter().collect(), 0);
        }
        if let Some(root) = el.shadow_root() {
            return Children::List(root.child_nodes(), 0);
        }
        if js::local_name_is(&el, "slot") {
            let opts = Obj::new().b("flatten", true).js();
            if let Ok(list) = js::call(&el, "assignedNodes", &[opts]) {
                let list: js_sys::Array = list.unchecked_into();
                if list.length() > 0 {
                    return Children::Nodes(list.iter().map(JsCast::unchecked_into).collect(), 0);
                }
            }
        }
    }
    Children::List(node.child_nodes(), 0)
}

/// The element's parent in the composed tree: across shadow roots to their host, and out of a
/// same-origin iframe to the `<iframe>` element.
pub fn composed_parent(node: &Node) -> Option<Node> {
    if let Some(parent) = node.parent_node() {
        if parent.node_type() == 11 {
            let host = js::get(&parent, "host");
            return (!host.is_undefined() && !host.is_null()).then(|| host.unchecked_into());
        }
        if parent.node_type() == 9 {
            let doc: Document = parent.unchecked_into();
            return doc
                .default_view()
                .and_then(|w| w.frame_element().ok().flatten())
                .map(Into::into);
        }
        return Some(parent);
    }
    None
}

/// `node` is `ancestor` or inside it in the composed tree.
pub fn composed_contains(ancestor: &Node, node: &Node) -> bool {
    let mut current = Some(node.clone());
    while let Some(n) = current {
        if n == *ancestor {
            return true;
        }
        current = composed_parent(&n);
    }
    false
}

/// In a connected document that is still shown: removed nodes, and nodes of an iframe that was
/// removed, are detached.
pub fn attached(el: &Element) -> bool {
    if !el.is_connected() {
        return false;
    }
    let Some(win) = window_of(el) else {
        return false;
    };
    match win.frame_element() {
        Ok(Some(frame)) => attached(&frame),
        _ => true,
    }
}

pub fn attr(el: &Element, name: &'static str) -> Option<String> {
    js::attribute(el, js::intern(name))
}

/// A non-empty attribute, trimmed.
pub fn attr_text(el: &Element, name: &'static str) -> Option<String> {
    attr(el, name)
        .map(|v| one_line(&v))
        .filter(|v| !v.is_empty())
}

/// `type` of an `<input>` as the browser normalises it (`text` when absent or unknown).
pub fn input_type(el: &Element) -> String {
    js::get_str(el, "type")
        .unwrap_or_default()
        .to_ascii_lowercase()
}

pub fn is_password(el: &Element) -> bool {
    tag(el) == "input" && input_type(el) == "password"
}

/// Text-field kinds of `<input>` that take typed text.
pub fn is_text_input_type(t: &str) -> bool {
    matches!(
        t,
        "text"
            | "search"
            | "email"
            | "url"
            | "tel"
            | "password"
            | "number"
            | "date"
            | "datetime-local"
            | "month"
            | "time"
            | "week"
    )
}

/// Disabled: `:disabled` (own or from a disabled fieldset) or `aria-disabled="true"`.
pub fn is_disabled(el: &Element) -> bool {
    el.matches(":disabled").unwrap_or(false)
        || attr(el, "aria-disabled").is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Why the element cannot be seen, if it cannot: `display: none` on it or an ancestor, hidden
/// visibility, no size. Looks through iframes to the frame element.
#[inline(never)]
pub fn hidden_reason(el: &Element) -> Option<&'static str> {
    let visible = js::call(
        el,
        "checkVisibility",
        &[Obj::new()
            .b("visibilityProperty", true)
            .b("checkVisibilityCSS", true)
            .js()],
    )
    .ok()
    .and_then(|v| v.as_bool());
    if visible == Some(false) {
        let style = computed_style(el);
        return Some(match style.map(|s| style_prop(&s, "visibility")) {
            Some(v) if v == "hidden" || v == "collapse" => "it is hidden (visibility: hidden)",
            _ => "it is hidden (display: none on it or an ancestor)",
        });
    }
    if visible.is_none() {
        // Older browsers: walk up and look at `display`.
        let mut current: Option<Node> = Some(el.clone().into());
        while let Some(n) = current {
            if let Some(e) = as_element(&n)
                && computed_style(&e).is_some_and(|s| style_prop(&s, "display") == "none")
            {
                return Some("it is hidden (display: none on it or an ancestor)");
            }
            current = composed_parent(&n);
        }
    }
    let rect = el.get_bounding_client_rect();
    if rect.width() <= 0.0 && rect.height() <= 0.0 {
        return Some("it has no size on the page (hidden)");
    }
    if let Some(frame) = window_of(el).and_then(|w| w.frame_element().ok().flatten()) {
        return hidden_reason(&frame).map(|_| "it is inside a hidden frame");
    }
    None
}

/// The `role` of an element as the snapshot shows it, and whether it is a landmark (structural).
#[derive(Clone, Debug)]
pub struct Role {
    pub name: String,
    pub kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Landmark,
    Frame,
    Heading,
    Link,
    Button,
    Field,
}

const WIDGET_ROLES: &[&str] = &[
    "button",
    "link",
    "checkbox",
    "radio",
    "switch",
    "tab",
    "menuitem",
    "menuitemcheckbox",
    "menuitemradio",
    "option",
    "combobox",
    "listbox",
    "textbox",
    "searchbox",
    "slider",
    "spinbutton",
    "treeitem",
    "gridcell",
];
const LANDMARK_ROLES: &[&str] = &[
    "banner",
    "navigation",
    "main",
    "contentinfo",
    "complementary",
    "form",
    "region",
    "search",
    "dialog",
    "alertdialog",
];

fn kind_of_role(role: &str) -> Kind {
    match role {
        "link" => Kind::Link,
        "button" | "tab" | "menuitem" | "menuitemcheckbox" | "menuitemradio" | "switch"
        | "option" | "treeitem" | "gridcell" => Kind::Button,
        "heading" => Kind::Heading,
        _ if LANDMARK_ROLES.contains(&role) => Kind::Landmark,
        _ => Kind::Field,
    }
}

fn role(name: &str, kind: Kind) -> Option<Role> {
    Some(Role {
        name: name.to_string(),
        kind,
    })
}

/// The element's role, when the snapshot lists it.
#[inline(never)]
pub fn role_of(el: &Element) -> Option<Role> {
    if let Some(explicit) = attr(el, "role") {
        let first = explicit
            .split_ascii_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        if first == "heading"
            || WIDGET_ROLES.contains(&first.as_str())
            || LANDMARK_ROLES.contains(&first.as_str())
        {
            let kind = kind_of_role(&first);
            return role(&first, kind);
        }
        if first == "none" || first == "presentation" {
            return None;
        }
    }
    let t = tag(el);
    match t.as_str() {
        "a" | "area" if el.has_attribute("href") => role("link", Kind::Link),
        "button" | "summary" => role("button", Kind::Button),
        "input" => {
            let ty = input_type(el);
            match ty.as_str() {
                "hidden" => None,
                "checkbox" | "radio" => role(&ty, Kind::Field),
                "button" | "submit" | "reset" | "image" => role("button", Kind::Button),
                "range" => role("slider", Kind::Field),
                "number" => role("spinbutton", Kind::Field),
                "search" => role("searchbox", Kind::Field),
                "text" | "email" | "tel" | "url" | "password" => role("textbox", Kind::Field),
                other => role(&format!("input[type={other}]"), Kind::Field),
            }
        }
        "textarea" => role("textbox", Kind::Field),
        "select" => {
            let multiple = el.has_attribute("multiple");
            role(if multiple { "listbox" } else { "combobox" }, Kind::Field)
        }
        "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => role("heading", Kind::Heading),
        "nav" => role("navigation", Kind::Landmark),
        "main" => role("main", Kind::Landmark),
        "aside" => role("complementary", Kind::Landmark),
        "search" => role("search", Kind::Landmark),
        "dialog" => role("dialog", Kind::Landmark),
        "header" | "footer" => {
            let sectioning = el.parent_element().and_then(|p| {
                p.closest("article, aside, main, nav, section")
                    .ok()
                    .flatten()
            });
            if sectioning.is_some() {
                None
            } else if t == "header" {
                role("banner", Kind::Landmark)
            } else {
                role("contentinfo", Kind::Landmark)
            }
        }
        "form" | "section"
            if el.has_attribute("aria-label") || el.has_attribute("aria-labelledby") =>
        {
            role(if t == "form" { "form" } else { "region" }, Kind::Landmark)
        }
        "form" => role("form", Kind::Landmark),
        "iframe" | "frame" => role("iframe", Kind::Frame),
        _ => {
            let html: &HtmlElement = el.unchecked_ref();
            let editable = html.is_content_editable()
                && !el
                    .parent_element()
                    .is_some_and(|p| p.unchecked_ref::<HtmlElement>().is_content_editable());
            if editable {
                role("textbox", Kind::Field)
            } else if el.has_attribute("onclick") {
                role("clickable", Kind::Button)
            } else {
                None
            }
        }
    }
}

/// Roles whose name comes from their content.
fn name_from_content(el: &Element, role: Option<&str>) -> bool {
    matches!(
        role,
        Some(
            "button"
                | "link"
                | "heading"
                | "tab"
                | "menuitem"
                | "menuitemcheckbox"
                | "menuitemradio"
                | "option"
                | "switch"
                | "treeitem"
                | "checkbox"
                | "radio"
                | "gridcell"
                | "clickable"
        )
    ) && !matches!(tag(el).as_str(), "input" | "select" | "textarea")
}

/// How deep [`subtree_text`] looks (a name from deeper down is not a useful name, and a page's
/// depth must not run the stack out).
const NAME_DEPTH: usize = 48;

/// Text of an element's subtree for names: text nodes, `alt` of images, `aria-label` of
/// children; skips hidden (`hidden`, `aria-hidden`), scripts and styles. At most `limit` bytes.
pub fn subtree_text(node: &Node, out: &mut String, limit: usize) {
    let mut nodes = NAME_NODES;
    subtree_text_within(node, out, limit, NAME_DEPTH, &mut nodes);
}

/// How many nodes [`subtree_text`] looks at, at most (a link around a large, textless subtree
/// must not cost the page a long task).
const NAME_NODES: usize = 400;

fn subtree_text_within(
    node: &Node,
    out: &mut String,
    limit: usize,
    depth: usize,
    nodes: &mut usize,
) {
    if depth == 0 {
        return;
    }
    let mut children = flat_children_of(node);
    while let Some(child) = children.current() {
        children.advance();
        if out.len() >= limit || *nodes == 0 {
            return;
        }
        *nodes -= 1;
        match child.node_type() {
            TEXT_NODE => push_collapsed(out, &child.text_content().unwrap_or_default()),
            ELEMENT_NODE => {
                let el: Element = child.unchecked_into();
                let t = tag(&el);
                if matches!(t.as_str(), "script" | "style" | "noscript" | "template")
                    || el.has_attribute("hidden")
                    || attr(&el, "aria-hidden").as_deref() == Some("true")
                    || is_own_host(&el)
                {
                    continue;
                }
                if t == "input" || t == "select" || t == "textarea" {
                    continue;
                }
                if let Some(label) = attr_text(&el, "aria-label") {
                    push_collapsed(out, " ");
                    push_collapsed(out, &label);
                    push_collapsed(out, " ");
                    continue;
                }
                if t == "img" {
                    if let Some(alt) = attr_text(&el, "alt") {
                        push_collapsed(out, &alt);
                    }
                    continue;
                }
                subtree_text_within(&el, out, limit, depth - 1, nodes);
            }
            _ => {}
        }
    }
}

fn text_of(node: &Node) -> String {
    let mut out = String::new();
    subtree_text(node, &mut out, 400);
    one_line(&out)
}

/// The texts of the `<label>`s of a form control.
fn label_texts(el: &Element) -> Option<String> {
    let labels = js::get(el, "labels");
    if labels.is_null() || labels.is_undefined() {
        return None;
    }
    let list: web_sys::NodeList = labels.unchecked_into();
    let mut out = String::new();
    for i in 0..list.length() {
        if let Some(label) = list.item(i) {
            push_collapsed(&mut out, " ");
            push_collapsed(&mut out, &text_of(&label));
        }
    }
    let out = one_line(&out);
    (!out.is_empty()).then_some(out)
}

/// The element's accessible name (a practical subset of the W3C algorithm). Never a field's
/// value, except the label of `<input type=submit|button|reset>` (its value is its caption).
#[inline(never)]
pub fn accessible_name(el: &Element, role: Option<&str>) -> String {
    let name = accessible_name_full(el, role);
    clip(&name, NAME_MAX)
}

fn accessible_name_full(el: &Element, role: Option<&str>) -> String {
    if let Some(ids) = attr(el, "aria-labelledby") {
        let root = el.get_root_node();
        let mut out = String::new();
        for id in ids.split_ascii_whitespace() {
            let found = js::call(&root, "getElementById", &[JsValue::from_str(id)]);
            if let Ok(found) = found
                && !found.is_null()
                && !found.is_undefined()
            {
                push_collapsed(&mut out, " ");
                push_collapsed(&mut out, &text_of(found.unchecked_ref()));
            }
        }
        let out = one_line(&out);
        if !out.is_empty() {
            return out;
        }
    }
    if let Some(label) = attr_text(el, "aria-label") {
        return label;
    }
    let t = tag(el);
    if t == "input" {
        let ty = input_type(el);
        match ty.as_str() {
            "submit" | "reset" | "button" => {
                return attr_text(el, "value").unwrap_or_else(|| match ty.as_str() {
                    "submit" => "Submit".to_string(),
                    "reset" => "Reset".to_string(),
                    _ => String::new(),
                });
            }
            "image" => {
                if let Some(alt) = attr_text(el, "alt") {
                    return alt;
                }
            }
            _ => {}
        }
    }
    if matches!(
        t.as_str(),
        "input" | "textarea" | "select" | "button" | "meter" | "progress"
    ) && let Some(labels) = label_texts(el)
    {
        return labels;
    }
    if t == "img"
        && let Some(alt) = attr_text(el, "alt")
    {
        return alt;
    }
    if (t == "iframe" || t == "frame")
        && let Some(title) = attr_text(el, "title")
    {
        return title;
    }
    if name_from_content(el, role) {
        let text = text_of(el);
        if !text.is_empty() {
            return text;
        }
    }
    if let Some(title) = attr_text(el, "title") {
        return title;
    }
    if matches!(t.as_str(), "input" | "textarea")
        && let Some(placeholder) = attr_text(el, "placeholder")
    {
        return placeholder;
    }
    if matches!(t.as_str(), "form" | "section") {
        // Named through aria-labelledby above; nothing else names them.
        return String::new();
    }
    String::new()
}

/// How the tools name an element in their answers: `button "Save"`, or the tag with its id.
#[inline(never)]
pub fn describe(el: &Element) -> String {
    let role = role_of(el);
    let role_name = role.as_ref().map(|r| r.name.as_str());
    let name = accessible_name(el, role_name);
    let what = match role_name {
        Some(r) => r.to_string(),
        None => tag(el),
    };
    let mut out = what;
    if !name.is_empty() {
        out.push(' ');
        out.push_str(&crate::text::quoted(&name));
    } else if let Some(id) = attr_text(el, "id") {
        out.push('#');
        out.push_str(&clip(&id, 40));
    } else if let Some(class) = attr_text(el, "class") {
        let first = class.split_ascii_whitespace().next().unwrap_or("");
        out.push('.');
        out.push_str(&clip(first, 40));
    }
    out
}

/// The focused element, looking into open shadow roots and same-origin iframes.
pub fn deep_active_element(doc: &Document) -> Option<Element> {
    let mut active = doc.active_element()?;
    loop {
        if let Some(root) = active.shadow_root()
            && let Some(inner) = root.active_element()
        {
            active = inner;
            continue;
        }
        if let Some(inner_doc) = frame_document(&active)
            && let Some(inner) = inner_doc.active_element()
            && Some(&inner)
                != inner_doc
                    .body()
                    .as_ref()
                    .map(|b| b.unchecked_ref::<Element>())
        {
            active = inner;
            continue;
        }
        return Some(active);
    }
}

/// The element at a viewport point of `doc`, looking into open shadow roots.
pub fn deep_element_from_point(doc: &Document, x: f32, y: f32) -> Option<Element> {
    let mut hit = doc.element_from_point(x, y)?;
    // Bounded: a page cannot keep this looping; 512 nested roots are far more than pages use.
    for _ in 0..512 {
        let Some(root) = hit.shadow_root() else { break };
        match root.element_from_point(x, y) {
            Some(inner) if inner != hit => hit = inner,
            _ => break,
        }
    }
    Some(hit)
}

/// Time a selector lookup may take in all (its slices and the page's tasks between them).
pub const LOOKUP_BUDGET_MS: f64 = 10_000.0;

/// Why a selector lookup found no element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupMiss {
    /// The browser cannot parse the selector.
    Invalid,
    /// Nothing matches, in the document nor in any open shadow root or same-origin frame.
    NoMatch,
    /// Nothing matched in the part searched before [`LOOKUP_BUDGET_MS`] was spent.
    TimedOut,
    /// Nothing in the scope matches; the document has a match outside it (or in the widget's
    /// element). Only in the `embedded` build, with a scope.
    Refused(Refusal),
}

/// The first element matching a CSS selector: in the document (the browser's own, one call),
/// else in the open shadow roots and same-origin iframes, found by walking the flat tree in
/// slices ([`Lookup::step`]) with an explicit stack: a page of 100,000 elements does not block
/// its main thread, nor does its depth overflow the stack. Our own host is never a match.
pub struct Lookup {
    selector: String,
    stack: Vec<LookupFrame>,
    started: f64,
    scope: Scope,
}

struct LookupFrame {
    children: Children,
}

/// [`Lookup::start`]'s answer: found at once, or a walk to run in slices.
pub enum Looked {
    Found(Element),
    Miss(LookupMiss),
    Walk(Lookup),
}

impl Lookup {
    /// Starts looking for `selector` in `scope` of `doc`.
    pub fn start(doc: &Document, scope: &Scope, selector: &str) -> Looked {
        if let Some(root) = scope.root() {
            return Self::start_in(root, scope, selector);
        }
        match pristine::query(doc, selector) {
            Err(_) => return Looked::Miss(LookupMiss::Invalid),
            Ok(Some(el)) if !is_own_host(&el) && scope.refuses(&el).is_none() => {
                return Looked::Found(el);
            }
            // Our host matched first: the next match, if any (the list is the browser's own).
            Ok(Some(_)) => {
                if let Ok(list) = pristine::query_all(doc, selector)
                    && let Some(el) = first_not_host(&list, scope)
                {
                    return Looked::Found(el);
                }
            }
            Ok(None) => {}
        }
        let root: Node = match doc.document_element() {
            Some(el) => el.into(),
            None => return Looked::Miss(LookupMiss::NoMatch),
        };
        Looked::Walk(Self {
            selector: selector.to_string(),
            stack: vec![LookupFrame {
                children: flat_children_of(&root),
            }],
            started: crate::slices::now(),
            scope: scope.clone(),
        })
    }

    /// [`Lookup::start`] in the subtree of `root`: `root` itself, its light tree (the browser's
    /// own search), then a walk into its open shadow roots and same-origin frames.
    fn start_in(root: &Element, scope: &Scope, selector: &str) -> Looked {
        match pristine::matches(root, selector) {
            Err(_) => return Looked::Miss(LookupMiss::Invalid),
            Ok(true) if scope.refuses(root).is_none() => return Looked::Found(root.clone()),
            Ok(_) => {}
        }
        match pristine::query_all(root, selector) {
            Err(_) => return Looked::Miss(LookupMiss::Invalid),
            Ok(list) => {
                if let Some(el) = first_not_host(&list, scope) {
                    return Looked::Found(el);
                }
            }
        }
        let inner: Option<JsValue> = match root.shadow_root() {
            Some(shadow) => Some(shadow.into()),
            None => frame_document(root).map(Into::into),
        };
        if let Some(inner) = inner
            && let Ok(list) = pristine::query_all(&inner, selector)
            && let Some(el) = first_not_host(&list, scope)
        {
            return Looked::Found(el);
        }
        Looked::Walk(Self {
            selector: selector.to_string(),
            stack: vec![LookupFrame {
                children: flat_children_of(root),
            }],
            started: crate::slices::now(),
            scope: scope.clone(),
        })
    }

    /// Nothing matched in the scope: refused when the document matches elsewhere (outside the
    /// scope, or in the widget's element), else no match. The content script has no refusals.
    fn missed(&self) -> LookupMiss {
        if !cfg!(feature = "embedded") {
            return LookupMiss::NoMatch;
        }
        let doc = match self.scope.root() {
            Some(root) => root.owner_document(),
            None => web_sys::window().and_then(|w| w.document()),
        };
        if let Some(doc) = doc
            && let Ok(list) = pristine::query_all(&doc, &self.selector)
        {
            for i in 0..list.length().min(1000) {
                if let Some(el) = list.item(i).and_then(|n| as_element(&n))
                    && let Some(refusal) = self.scope.refuses(&el)
                {
                    return LookupMiss::Refused(refusal);
                }
            }
        }
        LookupMiss::NoMatch
    }

    /// Walks until `until` (a `performance.now()` time); `Some` once the element is found, the
    /// page is searched, or the budget is spent.
    #[inline(never)]
    pub fn step(&mut self, until: f64) -> Option<Result<Element, LookupMiss>> {
        let mut count = 0u32;
        while let Some(top) = self.stack.last_mut() {
            let Some(child) = top.children.current() else {
                self.stack.pop();
                continue;
            };
            top.children.advance();
            count += 1;
            if count.is_multiple_of(16) {
                let t = crate::slices::now();
                if t - self.started >= LOOKUP_BUDGET_MS {
                    self.stack = Vec::new();
                    return Some(Err(LookupMiss::TimedOut));
                }
                if t >= until {
                    return None;
                }
            }
            let Some(el) = as_element(&child) else {
                continue;
            };
            if is_own_host(&el) {
                continue;
            }
            // A shadow root or a frame's document is searched by the browser in one call; the
            // walk still goes inside for the roots and frames nested there.
            let scope: Option<JsValue> = if let Some(root) = el.shadow_root() {
                Some(root.into())
            } else {
                frame_document(&el).map(Into::into)
            };
            if let Some(scope) = scope
                && let Ok(Some(found)) = pristine::query(&scope, &self.selector)
                && self.scope.refuses(&found).is_none()
            {
                self.stack = Vec::new();
                return Some(Ok(found));
            }
            let children = flat_children_of(&el);
            if !children.is_empty() {
                self.stack.push(LookupFrame { children });
            }
        }
        Some(Err(self.missed()))
    }
}

/// The first element of `list` that is not our host and that `scope` admits.
fn first_not_host(list: &web_sys::NodeList, scope: &Scope) -> Option<Element> {
    for i in 0..list.length() {
        if let Some(node) = list.item(i)
            && let Some(el) = as_element(&node)
            && !is_own_host(&el)
            && scope.refuses(&el).is_none()
        {
            return Some(el);
        }
    }
    None
}
