//! The facts about an element that the agent's safety gate (`gg_agent::gate`) reads beyond its
//! type and label: its `aria-label`, what it says (the `value` of a submit input, its text),
//! whether it is hidden, and the method its form submits with. Never a field's value: a submit
//! or button input's `value` is its caption, not something typed.
//!
//! Read from attributes, not from DOM properties a page can shadow (`form.method` is the
//! `<input name="method">` of a form that has one).

use alloc::string::String;
use web_sys::Element;

use crate::dom;
use crate::js::{self, Obj};
use crate::text::clip;

/// Longest text reported, in characters (enough for any button caption; a container's text is
/// cut, and its beginning still says what it is).
const TEXT_CHARS: usize = 200;

/// `facts` (the field facts built so far) with `aria_label`, `text` and `hidden`.
pub fn field_extras(el: &Element, facts: Obj) -> Obj {
    let tag = dom::tag(el);
    let caption_input = tag == "input"
        && matches!(
            dom::input_type(el).as_str(),
            "submit" | "button" | "reset" | "image"
        );
    let text = if caption_input {
        dom::attr_text(el, "value").or_else(|| dom::attr_text(el, "alt"))
    } else if matches!(tag.as_str(), "input" | "textarea" | "select") {
        // What a field says is its label (already there); its content is a value.
        None
    } else {
        js::get_str(el, "textContent")
            .map(|t| {
                t.split_whitespace()
                    .collect::<alloc::vec::Vec<_>>()
                    .join(" ")
            })
            .filter(|t| !t.is_empty())
    };
    let hidden = dom::input_type(el) != "hidden" && dom::hidden_reason(el).is_some();
    facts
        .opt("aria_label", dom::attr_text(el, "aria-label").as_deref())
        .opt("text", text.map(|t| clip(&t, TEXT_CHARS)).as_deref())
        .b("hidden", hidden)
}

/// How clicking `el` submits `form`: the submitter's `formmethod`, else the form's `method`
/// attribute, lowercase; `get` when neither says (the HTML default).
pub fn form_method(el: &Element, form: &Element) -> String {
    let method = dom::attr_text(el, "formmethod")
        .or_else(|| dom::attr_text(form, "method"))
        .map(|m| m.to_ascii_lowercase());
    match method.as_deref() {
        Some("post") => "post".into(),
        Some("dialog") => "dialog".into(),
        _ => "get".into(),
    }
}
