//! Fields whose value never reaches the model: passwords, one-time codes, payment cards and
//! hidden inputs (CSRF tokens), judged by the classification the agent's gate uses
//! ([`gg_fields`]), from the field's markup.

use web_sys::Element;

use crate::dom;
pub use gg_fields::SecretKind;

/// The kind of secret `el` (an `<input>`, `<textarea>` or `<select>`) holds, if any. `label` is
/// its accessible name when the caller has it; `visible_only` leaves out the judgement of CSS
/// visibility (for copies in an inert document, which have no layout).
pub fn secret_kind(el: &Element, label: Option<&str>, visible_only: bool) -> Option<SecretKind> {
    let tag = dom::tag(el);
    if !matches!(tag.as_str(), "input" | "textarea" | "select") {
        return None;
    }
    let input_type = (tag == "input").then(|| dom::input_type(el));
    let autocomplete = dom::attr(el, "autocomplete");
    let name = dom::attr(el, "name");
    let id = dom::attr(el, "id");
    let placeholder = dom::attr(el, "placeholder");
    let aria_label = dom::attr(el, "aria-label");
    let hidden = !visible_only
        && input_type.as_deref() != Some("hidden")
        && dom::hidden_reason(el).is_some();
    gg_fields::Field {
        autocomplete: autocomplete.as_deref(),
        input_type: input_type.as_deref(),
        name: name.as_deref(),
        id: id.as_deref(),
        label,
        placeholder: placeholder.as_deref(),
        aria_label: aria_label.as_deref(),
        hidden,
    }
    .secret_kind()
}

/// How a snapshot names the kind of secret (instead of the value).
pub fn flag(kind: SecretKind) -> &'static str {
    match kind {
        SecretKind::Password => "password",
        SecretKind::OneTimeCode => "one-time-code",
        SecretKind::PaymentCard => "payment-card",
        SecretKind::Hidden => "hidden-field",
    }
}
