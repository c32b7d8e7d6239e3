//! The part of the page the tools may see and act on.
//!
//! The content script's tools see the whole page: there [`Scope`] is empty (a zero-sized type
//! whose checks are constants, so the extension's build carries none of this). In the
//! `embedded` build a page may confine the widget's tools to one element's subtree (its
//! `scope` attribute): the walks start at that element, selectors and refs resolve only to
//! elements inside it (in the composed tree: its open shadow roots and same-origin frames
//! count as inside), and the widget's own element ([`crate::WIDGET_TAG`]) and whatever is in it
//! are never a target.

use web_sys::Element;

/// Where the tools may look. See the module docs.
#[derive(Clone, Default)]
pub struct Scope {
    #[cfg(feature = "embedded")]
    root: Option<Element>,
}

impl Scope {
    /// The whole page.
    pub fn page() -> Self {
        Self::default()
    }

    /// The subtree of `root`, or the whole page when `None`.
    #[cfg(feature = "embedded")]
    pub fn within(root: Option<Element>) -> Self {
        Self { root }
    }

    /// The scope's element; `None` for the whole page (always, outside the `embedded` build).
    #[inline(always)]
    pub fn root(&self) -> Option<&Element> {
        #[cfg(feature = "embedded")]
        {
            self.root.as_ref()
        }
        #[cfg(not(feature = "embedded"))]
        {
            None
        }
    }

    /// Why the tools may not act on `el`, if they may not: outside the scope, or the widget's
    /// own element or inside it. Always `None` outside the `embedded` build.
    #[inline(always)]
    pub fn refuses(&self, el: &Element) -> Option<Refusal> {
        #[cfg(feature = "embedded")]
        {
            refusal(self.root.as_ref(), el)
        }
        #[cfg(not(feature = "embedded"))]
        {
            let _ = el;
            None
        }
    }
}

/// Why [`Scope::refuses`] an element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "embedded"), allow(dead_code))]
pub enum Refusal {
    /// Outside the scope's subtree.
    Outside,
    /// The widget's own element, or inside it.
    Widget,
}

impl Refusal {
    /// What the tool error says of an element named as `what` (`the element matched by ...`).
    pub fn message(self, what: &str) -> alloc::string::String {
        match self {
            Self::Outside => alloc::format!(
                "{what} is outside the widget's scope: this page lets the assistant use only \
                 part of the page. Call snapshot_page to see the elements inside it"
            ),
            Self::Widget => alloc::format!(
                "{what} is the Gemma Gem widget itself (or inside it); the page tools never act \
                 on it"
            ),
        }
    }
}

#[cfg(feature = "embedded")]
fn refusal(root: Option<&Element>, el: &Element) -> Option<Refusal> {
    use crate::dom;
    use web_sys::Node;
    // One walk up the composed tree: through the widget's element means refused, reaching the
    // scope's element means inside. Bounded: a page's depth cannot keep it going for ever.
    let root: Option<&Node> = root.map(AsRef::as_ref);
    let mut inside = root.is_none();
    let mut current: Option<Node> = Some(el.clone().into());
    let mut steps = 0u32;
    while let Some(node) = current {
        steps += 1;
        if steps > 100_000 {
            break;
        }
        if let Some(e) = dom::as_element(&node)
            && dom::is_own_host(&e)
        {
            return Some(Refusal::Widget);
        }
        if !inside && root.is_some_and(|r| *r == node) {
            inside = true;
        }
        current = dom::composed_parent(&node);
    }
    (!inside).then_some(Refusal::Outside)
}
