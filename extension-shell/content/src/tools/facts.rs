//! The gate's `get_element_facts`: what the element is, its form and that form's fields, the
//! link it is in. Never a value.

use alloc::format;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::Element;

use super::gate_facts;
use crate::dom;
use crate::js::{self, Obj};

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
pub(super) fn element_facts(el: &Element) -> JsValue {
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
        let mut n = 0;
        for i in 0..count.min(500) {
            let field = js::get(&elements, &format!("{i}"));
            if field.is_object() {
                // By index: a page may replace `Array.prototype.push`.
                fields.set(n, field_facts(field.unchecked_ref()));
                n += 1;
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
