//! Acting on the element a call names: finding it (at once, or by a lookup run in slices),
//! checking that a selector still names the element the gate was told about, then clicking it,
//! typing into it or answering the gate's element facts.

use alloc::format;
use alloc::string::String;
use wasm_bindgen::JsValue;
use web_sys::{Document, Element};

use super::click::click;
use super::facts::element_facts;
use super::type_text::type_text;
use super::{Begun, State, Target, ToolErr, lookup_error};
use crate::dom::{Looked, Lookup};
use crate::slices::Work;
use crate::text::clip;

impl State {
    /// The element `target` names, or the lookup to run in slices (a selector that the
    /// document itself does not match: open shadow roots and frames are searched).
    fn locate(&self, doc: &Document, target: &Target) -> Result<Located, ToolErr> {
        match target {
            Target::Ref(r) => self.resolve_ref(r).map(Located::Found),
            Target::Selector(s) => match Lookup::start(doc, &self.scope, s) {
                Looked::Found(el) => Ok(Located::Found(el)),
                Looked::Miss(miss) => Err(lookup_error(s, miss)),
                Looked::Walk(lookup) => Ok(Located::Walk(lookup)),
            },
        }
    }

    /// Starts `then` on the element of `target`: at once when it is known, else as work that
    /// looks it up in slices first.
    pub(super) fn on_element(
        &mut self,
        doc: &Document,
        target: Target,
        then: Then,
    ) -> Result<Begun, ToolErr> {
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
