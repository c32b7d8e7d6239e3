//! The safety gate: every tool call is classed [`RiskClass::Read`], [`RiskClass::Act`] or
//! [`RiskClass::Sensitive`], in code, outside the model.
//!
//! Sensitive calls wait for the user's decision through an [`Approver`] (allow once, always on
//! this site, deny) unless the user already allowed that kind of call on the site (see
//! [`SitePermissions`](crate::SitePermissions)). Sensitive is:
//! - `run_javascript`, always;
//! - typing into a password, payment-card or one-time-code field;
//! - clicking a submit button of a form that has such fields, or typing with `submit: true`
//!   into such a form;
//! - leaving the site: clicking a link, or submitting a form, whose destination is another site
//!   (or an app: `mailto:`, `tel:`), or cannot be judged;
//! - a tool that is not built in, unless the agent's configuration gives it a class.
//!
//! The gate reads no DOM: the [`ToolExecutor`](crate::ToolExecutor) describes the target element
//! as [`ElementFacts`], and the decision is a pure function of the call, the site and the facts.
//!
//! ```
//! use gg_agent::gate::{classify_builtin, ElementFacts, FieldFacts, RiskClass, SensitiveField,
//!     SensitiveReason};
//! use gg_agent::{BuiltinCall, ToolCall};
//! use serde_json::json;
//!
//! let call = ToolCall::from_value("type_text", json!({"ref": "e4", "text": "hunter2"}));
//! let call = BuiltinCall::parse(&call).unwrap().unwrap();
//! let facts = ElementFacts {
//!     field: FieldFacts { tag: "input".into(), input_type: Some("password".into()), ..Default::default() },
//!     ..Default::default()
//! };
//! let class = classify_builtin(&call, "https://bank.example", Some(&facts));
//! assert_eq!(class.class, RiskClass::Sensitive);
//! assert_eq!(class.reasons, vec![SensitiveReason::TypeIntoSensitiveField { field: SensitiveField::Password }]);
//! ```

use std::fmt;

use futures::future::LocalBoxFuture;
use serde::{Deserialize, Serialize};

use crate::builtin::{BuiltinCall, ScrollArgs};
use crate::message::ToolCall;
use crate::permissions::Permission;
use crate::site::{Destination, destination};

/// How much a tool call can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RiskClass {
    /// Only reads the page (or moves the viewport).
    Read,
    /// Changes the page in an ordinary way (click, type).
    Act,
    /// Needs the user's approval.
    Sensitive,
}

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
}

impl SensitiveField {
    fn describe(self) -> &'static str {
        match self {
            Self::Password => "a password field",
            Self::PaymentCard => "a payment card field",
            Self::OneTimeCode => "a one-time code field",
        }
    }
}

/// Why a call is sensitive.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SensitiveReason {
    /// It runs JavaScript in the page.
    RunJavascript,
    /// It types into a sensitive field.
    TypeIntoSensitiveField {
        /// The kind of field.
        field: SensitiveField,
    },
    /// It submits a form that has sensitive fields.
    SubmitSensitiveForm {
        /// The kinds of sensitive fields in the form.
        fields: Vec<SensitiveField>,
    },
    /// It navigates away from the site.
    LeaveSite {
        /// Where to (an origin, or the URL when it has none).
        destination: String,
    },
    /// A tool the gate knows nothing about.
    UnclassifiedTool {
        /// Its name.
        name: String,
    },
    /// The executor gave no facts about the element, so the gate cannot tell what it is.
    UnverifiedElement,
}

impl SensitiveReason {
    /// The permission that, once granted on a site, covers this reason. `None` for reasons that
    /// must always be asked about.
    pub fn permission(&self) -> Option<Permission> {
        match self {
            Self::RunJavascript => Some(Permission::RunJavascript),
            Self::TypeIntoSensitiveField { field } => Some(Permission::TypeIntoField(*field)),
            Self::SubmitSensitiveForm { .. } => Some(Permission::SubmitSensitiveForm),
            Self::LeaveSite { destination } => Some(Permission::LeaveSiteTo {
                destination: destination.clone(),
            }),
            Self::UnclassifiedTool { name } => Some(Permission::Tool { name: name.clone() }),
            Self::UnverifiedElement => None,
        }
    }
}

impl fmt::Display for SensitiveReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RunJavascript => f.write_str("run JavaScript in the page"),
            Self::TypeIntoSensitiveField { field } => write!(f, "type into {}", field.describe()),
            Self::SubmitSensitiveForm { fields } => {
                let kinds: Vec<&str> = fields.iter().map(|field| field.describe()).collect();
                write!(f, "submit a form with {}", kinds.join(" and "))
            }
            Self::LeaveSite { destination } => write!(f, "leave the site for {destination}"),
            Self::UnclassifiedTool { name } => write!(f, "use the tool {name}"),
            Self::UnverifiedElement => f.write_str("act on an element that could not be checked"),
        }
    }
}

/// The gate's verdict on one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Classification {
    /// The class.
    pub class: RiskClass,
    /// Why it is sensitive (empty unless `class` is [`RiskClass::Sensitive`]).
    pub reasons: Vec<SensitiveReason>,
}

impl Classification {
    fn plain(class: RiskClass) -> Self {
        Self {
            class,
            reasons: Vec::new(),
        }
    }

    fn with_reasons(base: RiskClass, reasons: Vec<SensitiveReason>) -> Self {
        if reasons.is_empty() {
            Self::plain(base)
        } else {
            Self {
                class: RiskClass::Sensitive,
                reasons,
            }
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
}

/// What the executor knows about the form an element belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FormFacts {
    /// The absolute URL the form submits to (`form.action`), if known.
    pub action: Option<String>,
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
}

/// Splits an identifier into lowercase words: `cardNumber_2` → `card`, `number`, `2`.
fn words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

const PASSWORD_MARKERS: &[&str] = &["password", "passwd", "passwort", "contrasena", "motdepasse"];
const CARD_MARKERS: &[&str] = &[
    "cardnumber",
    "ccnumber",
    "ccnum",
    "creditcard",
    "debitcard",
    "securitycode",
    "cardcode",
    "cardverification",
    "cardexpiry",
    "cardexpiration",
];
const CARD_WORDS: &[&str] = &["cvv", "cvc", "csc", "cvv2", "cvc2"];
const OTP_MARKERS: &[&str] = &[
    "onetimecode",
    "onetimepassword",
    "onetimepasscode",
    "verificationcode",
    "authcode",
    "authenticationcode",
    "smscode",
    "twofactor",
    "passcode",
];
const OTP_WORDS: &[&str] = &["otp", "totp", "hotp", "2fa", "mfa"];

impl FieldFacts {
    /// The kind of sensitive field this is, if any.
    ///
    /// Looks at, in order: `autocomplete` (`current-password`, `new-password`, `one-time-code`,
    /// `cc-*`), `type=password`, then words in the name, id, label and placeholder (`password`,
    /// `cvv`, `otp`, `card number`...).
    pub fn sensitive_kind(&self) -> Option<SensitiveField> {
        if let Some(autocomplete) = &self.autocomplete {
            for token in autocomplete.split_ascii_whitespace() {
                let token = token.to_ascii_lowercase();
                match token.as_str() {
                    "current-password" | "new-password" => return Some(SensitiveField::Password),
                    "one-time-code" => return Some(SensitiveField::OneTimeCode),
                    t if t.starts_with("cc-") => return Some(SensitiveField::PaymentCard),
                    _ => {}
                }
            }
        }
        if self
            .input_type
            .as_deref()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("password"))
        {
            return Some(SensitiveField::Password);
        }
        let texts = [&self.name, &self.id, &self.label, &self.placeholder];
        let mut all_words = Vec::new();
        for text in texts.into_iter().flatten() {
            all_words.extend(words(text));
        }
        let joined: String = all_words.concat();
        let has_marker = |markers: &[&str]| markers.iter().any(|m| joined.contains(m));
        let has_word = |list: &[&str]| all_words.iter().any(|w| list.contains(&w.as_str()));
        if has_marker(PASSWORD_MARKERS) {
            Some(SensitiveField::Password)
        } else if has_marker(OTP_MARKERS) || has_word(OTP_WORDS) {
            Some(SensitiveField::OneTimeCode)
        } else if has_marker(CARD_MARKERS) || has_word(CARD_WORDS) {
            Some(SensitiveField::PaymentCard)
        } else {
            None
        }
    }
}

impl FormFacts {
    /// The kinds of sensitive fields in the form, sorted, without repeats.
    pub fn sensitive_kinds(&self) -> Vec<SensitiveField> {
        let mut kinds: Vec<SensitiveField> = self
            .fields
            .iter()
            .filter_map(FieldFacts::sensitive_kind)
            .collect();
        kinds.sort_unstable();
        kinds.dedup();
        kinds
    }
}

fn push_unique(reasons: &mut Vec<SensitiveReason>, reason: SensitiveReason) {
    if !reasons.contains(&reason) {
        reasons.push(reason);
    }
}

/// Reasons that come from submitting `form` from a page on `site`.
fn submit_reasons(form: Option<&FormFacts>, site: &str, reasons: &mut Vec<SensitiveReason>) {
    let Some(form) = form else {
        return;
    };
    let fields = form.sensitive_kinds();
    if !fields.is_empty() {
        push_unique(reasons, SensitiveReason::SubmitSensitiveForm { fields });
    }
    if let Some(action) = &form.action
        && let Destination::Elsewhere(destination) = destination(site, action)
    {
        push_unique(reasons, SensitiveReason::LeaveSite { destination });
    }
}

/// Classifies a built-in call made on a page of `site`, given the facts about the element it
/// acts on ([`BuiltinCall::acted_on_element`]; `None` makes a click or typing sensitive).
pub fn classify_builtin(
    call: &BuiltinCall,
    site: &str,
    facts: Option<&ElementFacts>,
) -> Classification {
    match call {
        BuiltinCall::ReadPageContent(_)
        | BuiltinCall::SnapshotPage { .. }
        | BuiltinCall::GetPageTitle
        | BuiltinCall::TakeScreenshot
        | BuiltinCall::ScrollPage(ScrollArgs::By { .. } | ScrollArgs::ToElement { .. }) => {
            Classification::plain(RiskClass::Read)
        }
        BuiltinCall::RunJavascript { .. } => {
            Classification::with_reasons(RiskClass::Act, vec![SensitiveReason::RunJavascript])
        }
        BuiltinCall::ClickElement { .. } => {
            let Some(facts) = facts else {
                return Classification::with_reasons(
                    RiskClass::Act,
                    vec![SensitiveReason::UnverifiedElement],
                );
            };
            let mut reasons = Vec::new();
            if facts.is_submit {
                submit_reasons(facts.form.as_ref(), site, &mut reasons);
            }
            if let Some(href) = &facts.link_href
                && let Destination::Elsewhere(destination) = destination(site, href)
            {
                push_unique(&mut reasons, SensitiveReason::LeaveSite { destination });
            }
            Classification::with_reasons(RiskClass::Act, reasons)
        }
        BuiltinCall::TypeText(args) => {
            let Some(facts) = facts else {
                return Classification::with_reasons(
                    RiskClass::Act,
                    vec![SensitiveReason::UnverifiedElement],
                );
            };
            let mut reasons = Vec::new();
            if let Some(field) = facts.field.sensitive_kind() {
                reasons.push(SensitiveReason::TypeIntoSensitiveField { field });
            }
            if args.submit {
                submit_reasons(facts.form.as_ref(), site, &mut reasons);
            }
            Classification::with_reasons(RiskClass::Act, reasons)
        }
    }
}

/// Classifies a call of a tool that is not built in: `declared` is the class the agent's
/// configuration gives it; without one it is sensitive.
pub fn classify_custom(name: &str, declared: Option<RiskClass>) -> Classification {
    match declared {
        Some(RiskClass::Sensitive) | None => Classification::with_reasons(
            RiskClass::Sensitive,
            vec![SensitiveReason::UnclassifiedTool {
                name: name.to_owned(),
            }],
        ),
        Some(class) => Classification::plain(class),
    }
}

/// What the user is asked to decide.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The id of the call in the [`AgentEvent`](crate::AgentEvent)s.
    pub call_id: u64,
    /// The site the call acts on (normalized origin).
    pub site: String,
    /// The call, with its arguments.
    pub call: ToolCall,
    /// Why it needs approval.
    pub reasons: Vec<SensitiveReason>,
    /// One sentence for the user: "Gemma wants to run JavaScript in the page on https://...".
    pub summary: String,
}

impl ApprovalRequest {
    /// Builds a request with its summary.
    pub fn new(call_id: u64, site: &str, call: ToolCall, reasons: Vec<SensitiveReason>) -> Self {
        let what: Vec<String> = reasons.iter().map(ToString::to_string).collect();
        let summary = format!("Gemma wants to {} on {site}.", what.join(" and "));
        Self {
            call_id,
            site: site.to_owned(),
            call,
            reasons,
            summary,
        }
    }
}

/// The user's answer to an [`ApprovalRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run this call.
    AllowOnce,
    /// Run this call, and calls for the same reasons on this site from now on.
    AlwaysOnSite,
    /// Do not run it.
    Deny,
}

/// Asks the user about sensitive calls (the overlay's approval prompt).
///
/// The loop emits [`AgentEvent::AwaitingApproval`](crate::AgentEvent::AwaitingApproval) and then
/// awaits [`Approver::decide`]; the future resolves when the user answers. A cancelled run stops
/// awaiting it. `decide` is called only after the consumer of the event stream has taken the
/// `AwaitingApproval` event and polled again, so an answer from the overlay can arrive before
/// `decide` is called: keep answers keyed by [`ApprovalRequest::call_id`] until it is.
pub trait Approver {
    /// The user's decision on `request`.
    fn decide<'a>(&'a self, request: &'a ApprovalRequest) -> LocalBoxFuture<'a, ApprovalDecision>;
}

/// An approver that denies everything: for contexts with nobody to ask (command line,
/// automated runs).
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyAll;

impl Approver for DenyAll {
    fn decide<'a>(&'a self, _request: &'a ApprovalRequest) -> LocalBoxFuture<'a, ApprovalDecision> {
        Box::pin(async { ApprovalDecision::Deny })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::ElementTarget;
    use serde_json::json;

    fn field(
        input_type: Option<&str>,
        name: Option<&str>,
        autocomplete: Option<&str>,
    ) -> FieldFacts {
        FieldFacts {
            tag: "input".into(),
            input_type: input_type.map(Into::into),
            name: name.map(Into::into),
            autocomplete: autocomplete.map(Into::into),
            ..FieldFacts::default()
        }
    }

    fn parse(name: &str, args: serde_json::Value) -> BuiltinCall {
        BuiltinCall::parse(&ToolCall::from_value(name, args))
            .expect("builtin")
            .expect("valid")
    }

    #[test]
    fn recognizes_sensitive_fields() {
        use SensitiveField::*;
        let cases = [
            (field(Some("password"), Some("pw"), None), Some(Password)),
            (field(Some("PASSWORD"), None, None), Some(Password)),
            (
                field(Some("text"), None, Some("current-password")),
                Some(Password),
            ),
            (
                field(Some("text"), Some("userPassword"), None),
                Some(Password),
            ),
            (
                field(Some("text"), None, Some("section-pay billing cc-number")),
                Some(PaymentCard),
            ),
            (
                field(Some("tel"), Some("card_number"), None),
                Some(PaymentCard),
            ),
            (field(Some("text"), Some("cvv"), None), Some(PaymentCard)),
            (
                field(Some("text"), Some("cardCVC"), None),
                Some(PaymentCard),
            ),
            (
                field(Some("text"), None, Some("one-time-code")),
                Some(OneTimeCode),
            ),
            (
                field(Some("text"), Some("otpCode"), None),
                Some(OneTimeCode),
            ),
            (
                field(Some("text"), Some("verification-code"), None),
                Some(OneTimeCode),
            ),
            (field(Some("text"), Some("q"), Some("off")), None),
            (field(Some("text"), Some("hotpot"), None), None),
            (field(Some("email"), Some("cc"), Some("email")), None),
            (
                field(Some("text"), Some("username"), Some("username")),
                None,
            ),
        ];
        for (facts, expected) in cases {
            assert_eq!(facts.sensitive_kind(), expected, "{facts:?}");
        }
        let labelled = FieldFacts {
            tag: "input".into(),
            input_type: Some("text".into()),
            label: Some("Card number".into()),
            ..FieldFacts::default()
        };
        assert_eq!(labelled.sensitive_kind(), Some(PaymentCard));
        assert_eq!(
            words("cardNumber_2 XMLHttp"),
            ["card", "number", "2", "xmlhttp"]
        );
    }

    #[test]
    fn reads_are_read_and_javascript_is_sensitive() {
        for (name, args) in [
            ("read_page_content", json!({"format": "text"})),
            ("snapshot_page", json!({})),
            ("get_page_title", json!({})),
            ("take_screenshot", json!({})),
            ("scroll_page", json!({"direction": "down"})),
            ("scroll_page", json!({"ref": "e2"})),
        ] {
            let class = classify_builtin(&parse(name, args), "https://a.test", None);
            assert_eq!(class.class, RiskClass::Read, "{name}");
        }
        let js = classify_builtin(
            &parse("run_javascript", json!({"code": "1"})),
            "https://a.test",
            None,
        );
        assert_eq!(js.class, RiskClass::Sensitive);
        assert_eq!(js.reasons, [SensitiveReason::RunJavascript]);
    }

    #[test]
    fn clicks_are_acts_unless_they_submit_secrets_or_leave() {
        let site = "https://shop.test";
        let click = parse("click_element", json!({"ref": "e1"}));
        let plain = ElementFacts {
            field: FieldFacts {
                tag: "button".into(),
                ..FieldFacts::default()
            },
            ..ElementFacts::default()
        };
        assert_eq!(
            classify_builtin(&click, site, Some(&plain)).class,
            RiskClass::Act
        );
        assert_eq!(
            classify_builtin(&click, site, None).reasons,
            [SensitiveReason::UnverifiedElement]
        );

        let login_form = FormFacts {
            action: Some("https://shop.test/login".into()),
            fields: vec![
                field(Some("text"), Some("user"), None),
                field(Some("password"), None, None),
            ],
        };
        let submit = ElementFacts {
            is_submit: true,
            form: Some(login_form.clone()),
            ..plain.clone()
        };
        assert_eq!(
            classify_builtin(&click, site, Some(&submit)).reasons,
            [SensitiveReason::SubmitSensitiveForm {
                fields: vec![SensitiveField::Password]
            }]
        );
        // A non-submit button in the same form is an ordinary act.
        let show_password = ElementFacts {
            is_submit: false,
            ..submit.clone()
        };
        assert_eq!(
            classify_builtin(&click, site, Some(&show_password)).class,
            RiskClass::Act
        );

        let search_elsewhere = ElementFacts {
            is_submit: true,
            form: Some(FormFacts {
                action: Some("https://collector.evil/q".into()),
                fields: vec![field(Some("search"), Some("q"), None)],
            }),
            ..plain.clone()
        };
        assert_eq!(
            classify_builtin(&click, site, Some(&search_elsewhere)).reasons,
            [SensitiveReason::LeaveSite {
                destination: "https://collector.evil".into()
            }]
        );

        let link = |href: &str| ElementFacts {
            field: FieldFacts {
                tag: "a".into(),
                ..FieldFacts::default()
            },
            link_href: Some(href.into()),
            ..ElementFacts::default()
        };
        assert_eq!(
            classify_builtin(&click, site, Some(&link("https://shop.test/cart"))).class,
            RiskClass::Act
        );
        assert_eq!(
            classify_builtin(&click, site, Some(&link("https://other.test/"))).reasons,
            [SensitiveReason::LeaveSite {
                destination: "https://other.test".into()
            }]
        );
    }

    #[test]
    fn typing_is_sensitive_into_secrets_and_when_submitting_them() {
        let site = "https://bank.test";
        let form = FormFacts {
            action: Some("/login".into()),
            fields: vec![
                field(Some("text"), Some("user"), None),
                field(Some("password"), None, None),
            ],
        };
        let username = ElementFacts {
            field: field(Some("text"), Some("user"), None),
            form: Some(FormFacts {
                action: Some("https://bank.test/login".into()),
                ..form.clone()
            }),
            ..ElementFacts::default()
        };
        let type_user = parse("type_text", json!({"ref": "e1", "text": "ann"}));
        assert_eq!(
            classify_builtin(&type_user, site, Some(&username)).class,
            RiskClass::Act
        );
        let type_user_submit = parse(
            "type_text",
            json!({"ref": "e1", "text": "ann", "submit": true}),
        );
        assert_eq!(
            classify_builtin(&type_user_submit, site, Some(&username)).reasons,
            [SensitiveReason::SubmitSensitiveForm {
                fields: vec![SensitiveField::Password]
            }]
        );
        let password = ElementFacts {
            field: field(Some("password"), Some("pw"), None),
            form: Some(form),
            ..ElementFacts::default()
        };
        let type_password = parse(
            "type_text",
            json!({"selector": "#pw", "text": "x", "submit": true}),
        );
        let class = classify_builtin(&type_password, site, Some(&password));
        assert_eq!(class.class, RiskClass::Sensitive);
        assert_eq!(
            class.reasons,
            [
                SensitiveReason::TypeIntoSensitiveField {
                    field: SensitiveField::Password
                },
                SensitiveReason::SubmitSensitiveForm {
                    fields: vec![SensitiveField::Password]
                },
                // A relative action cannot be judged.
                SensitiveReason::LeaveSite {
                    destination: "/login".into()
                },
            ]
        );
        assert_eq!(
            type_password.acted_on_element(),
            Some(&ElementTarget::Selector("#pw".into()))
        );
    }

    #[test]
    fn custom_tools_default_to_sensitive() {
        assert_eq!(
            classify_custom("weather", Some(RiskClass::Read)).class,
            RiskClass::Read
        );
        let unknown = classify_custom("transfer_money", None);
        assert_eq!(unknown.class, RiskClass::Sensitive);
        assert_eq!(
            unknown.reasons[0].permission(),
            Some(Permission::Tool {
                name: "transfer_money".into()
            })
        );
    }

    #[test]
    fn approval_request_summarizes_reasons() {
        let request = ApprovalRequest::new(
            3,
            "https://a.test",
            ToolCall::from_value("type_text", json!({"ref": "e1", "text": "x"})),
            vec![
                SensitiveReason::TypeIntoSensitiveField {
                    field: SensitiveField::Password,
                },
                SensitiveReason::LeaveSite {
                    destination: "https://b.test".into(),
                },
            ],
        );
        assert_eq!(
            request.summary,
            "Gemma wants to type into a password field and leave the site for https://b.test on \
             https://a.test."
        );
    }
}
