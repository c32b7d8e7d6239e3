//! What a [`ToolExecutor`](crate::ToolExecutor) tells the [safety gate](crate::gate) about the
//! element a click or typing targets ([`ElementFacts`]: the field, its form, where it links),
//! and which kinds of fields are sensitive ([`SensitiveField`], judged by `gg-fields`). Plain
//! data, shared by the tools, the gate and the site permissions (none of which it imports).

use serde::{Deserialize, Serialize};

/// A kind of field whose content must be protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SensitiveField {
    /// A password.
    Password,
    /// A payment card number, security code or expiry.
    PaymentCard,
    /// A one-time code (2FA, SMS code).
    OneTimeCode,
    /// A hidden field (`type=hidden`, or not rendered): nothing the user sees or means to fill.
    Hidden,
}

impl SensitiveField {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::Password => "a password field",
            Self::PaymentCard => "a payment card field",
            Self::OneTimeCode => "a one-time code field",
            Self::Hidden => "a hidden field",
        }
    }
}

/// What the executor knows about a form field (or any element). Never its value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FieldFacts {
    /// Lowercase tag name (`input`, `textarea`, `button`, `a`, `div`...).
    pub tag: String,
    /// The `type` attribute of an `<input>`/`<button>`, lowercase.
    pub input_type: Option<String>,
    /// The `autocomplete` attribute.
    pub autocomplete: Option<String>,
    /// The `name` attribute.
    pub name: Option<String>,
    /// The `id` attribute.
    pub id: Option<String>,
    /// The accessible name (label).
    pub label: Option<String>,
    /// The `placeholder` attribute.
    pub placeholder: Option<String>,
    /// The `aria-label` attribute.
    pub aria_label: Option<String>,
    /// What it says: its visible text (a button, a link), or the `value` of an
    /// `<input type=submit|button|reset>`; at most a few hundred characters.
    pub text: Option<String>,
    /// Not rendered (`hidden`, `display: none`, zero size), though not `type=hidden`.
    pub hidden: bool,
}

/// What the executor knows about the form an element belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FormFacts {
    /// The absolute URL the form submits to (`form.action`), if known.
    pub action: Option<String>,
    /// `form.method`, lowercase (`get`, `post`, `dialog`).
    pub method: Option<String>,
    /// The form's fields.
    pub fields: Vec<FieldFacts>,
}

/// What the executor knows about the element a click or typing targets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ElementFacts {
    /// The element itself.
    pub field: FieldFacts,
    /// Clicking it submits its form (`<button>` of type submit, `<input type=submit|image>`).
    pub is_submit: bool,
    /// Its form, if any (`element.form`).
    pub form: Option<FormFacts>,
    /// The absolute URL it navigates to when clicked: its own `href` or that of the closest
    /// enclosing link. Relative URLs cannot be judged and count as leaving the site.
    pub link_href: Option<String>,
    /// The executor's name for this very element (not its ref or selector): an approval is
    /// given for it, and the executor refuses to act when the target is another element by then.
    pub identity: Option<String>,
}

impl FieldFacts {
    /// The kind of sensitive field this is, if any.
    ///
    /// Looks at, in order: `autocomplete` (`current-password`, `new-password`, `one-time-code`,
    /// `cc-*`), `type=password`, then words in the name, id, label and placeholder (`password`,
    /// `cvv`, `otp`, `card number`...).
    pub fn sensitive_kind(&self) -> Option<SensitiveField> {
        let field = gg_fields::Field {
            autocomplete: self.autocomplete.as_deref(),
            input_type: self.input_type.as_deref(),
            name: self.name.as_deref(),
            id: self.id.as_deref(),
            label: self.label.as_deref(),
            placeholder: self.placeholder.as_deref(),
            aria_label: self.aria_label.as_deref(),
            hidden: self.hidden,
        };
        Some(match field.secret_kind()? {
            gg_fields::SecretKind::Password => SensitiveField::Password,
            gg_fields::SecretKind::OneTimeCode => SensitiveField::OneTimeCode,
            gg_fields::SecretKind::PaymentCard => SensitiveField::PaymentCard,
            gg_fields::SecretKind::Hidden => SensitiveField::Hidden,
        })
    }
}

impl FormFacts {
    /// The kinds of sensitive fields in the form, sorted, without repeats.
    pub fn sensitive_kinds(&self) -> Vec<SensitiveField> {
        let mut kinds: Vec<SensitiveField> = self
            .fields
            .iter()
            .filter_map(FieldFacts::sensitive_kind)
            // Hidden inputs (CSRF tokens, ids) are in most forms; typing into one is what is
            // sensitive, not submitting it.
            .filter(|kind| *kind != SensitiveField::Hidden)
            .collect();
        kinds.sort_unstable();
        kinds.dedup();
        kinds
    }
}
