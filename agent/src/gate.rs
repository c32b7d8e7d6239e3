//! The safety gate: every tool call is classed [`RiskClass::Read`], [`RiskClass::Act`] or
//! [`RiskClass::Sensitive`], in code, outside the model.
//!
//! Sensitive calls wait for the user's decision through an [`Approver`] (allow once, always on
//! this site, for this task, deny) unless the user already allowed that kind of call on the
//! site (see [`SitePermissions`](crate::SitePermissions)). Sensitive is:
//! - `run_javascript`, always; it can be allowed once or for the running task, never for good;
//! - typing into a password, payment-card, one-time-code or hidden field;
//! - submitting a form, any form (clicking a submit button, typing with `submit: true`, which
//!   presses Enter); a form with secret fields also asks about those;
//! - clicking an element whose text, label or `aria-label` reads as destructive or purchasing
//!   (delete, remove, buy, pay, order, send, transfer, confirm..., one list in several
//!   languages: [`consequential_kind`]);
//! - leaving the origin: clicking a link, or submitting a form, whose destination is another
//!   origin (or an app: `mailto:`, `tel:`), or cannot be judged;
//! - a tool that is not built in, unless the agent's configuration gives it a class.
//!
//! An approval is bound to the exact call (a random nonce in the [`ApprovalRequest`]) and to the
//! element the facts describe ([`ElementFacts::identity`]): the executor refuses to act when the
//! target is no longer that element.
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

pub use crate::consequential::{ActionKind, consequential_kind, normalize};
pub use crate::facts::{ElementFacts, FieldFacts, FormFacts, SensitiveField};

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
    /// It submits a form (any form: a submit button, Enter in a field).
    SubmitForm {
        /// The form's method (`get`, `post`, `dialog`), lowercase; empty when there is no form.
        method: String,
    },
    /// It clicks an element whose text reads as a consequential action.
    Consequential {
        /// What the text says it does.
        action: ActionKind,
        /// The text that said so (normalised, at most 80 characters).
        label: String,
    },
    /// It navigates away from the origin.
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
            Self::SubmitForm { .. } => Some(Permission::SubmitForm),
            Self::Consequential { action, .. } => Some(Permission::Consequential(*action)),
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
            Self::SubmitForm { method } if method.is_empty() => {
                f.write_str("submit what was typed (press Enter)")
            }
            Self::SubmitForm { method } => {
                write!(f, "submit a form ({})", method.to_ascii_uppercase())
            }
            Self::Consequential { action, label } => {
                write!(f, "click “{label}” (it may {})", action.describe())
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

fn push_unique(reasons: &mut Vec<SensitiveReason>, reason: SensitiveReason) {
    if !reasons.contains(&reason) {
        reasons.push(reason);
    }
}

/// Reasons that come from submitting `form` from a page on `site`.
fn submit_reasons(form: Option<&FormFacts>, site: &str, reasons: &mut Vec<SensitiveReason>) {
    let method = form
        .and_then(|f| f.method.as_deref())
        .map(|m| m.trim().to_ascii_lowercase())
        .unwrap_or_else(|| {
            if form.is_some() {
                "get".into()
            } else {
                String::new()
            }
        });
    push_unique(reasons, SensitiveReason::SubmitForm { method });
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

/// Longest label quoted in a [`SensitiveReason::Consequential`].
const LABEL_CHARS: usize = 80;

/// What the element says it does, when that is consequential: its `aria-label`, label, text or
/// `name`/`id` (in that order; the first that reads as consequential wins).
fn consequential_reason(field: &FieldFacts) -> Option<SensitiveReason> {
    [&field.aria_label, &field.label, &field.text]
        .into_iter()
        .flatten()
        .find_map(|text| {
            let action = consequential_kind(text)?;
            let label: String = normalize(text).chars().take(LABEL_CHARS).collect();
            Some(SensitiveReason::Consequential { action, label })
        })
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
            if let Some(reason) = consequential_reason(&facts.field) {
                push_unique(&mut reasons, reason);
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
    /// Names this request, and only it: a random string from [`Approver::nonce`]. An answer is
    /// taken only with the nonce of a request that is waiting.
    #[serde(default)]
    pub nonce: String,
    /// Whether "always on this site" may be offered (not for `run_javascript`: at most for the
    /// task).
    #[serde(default)]
    pub allow_always: bool,
    /// The element the approval is for ([`ElementFacts::identity`]).
    #[serde(default)]
    pub element: Option<String>,
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
    /// Builds a request with its summary (nonce empty, no element: see the fields).
    pub fn new(call_id: u64, site: &str, call: ToolCall, reasons: Vec<SensitiveReason>) -> Self {
        let what: Vec<String> = reasons.iter().map(ToString::to_string).collect();
        let summary = format!("Gemma wants to {} on {site}.", what.join(" and "));
        let allow_always = reasons
            .iter()
            .all(|r| r.permission().is_some_and(|p| p.can_persist()));
        Self {
            call_id,
            nonce: String::new(),
            allow_always,
            element: None,
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
    /// Run this call, and calls for the same reasons on this site from now on. Taken as
    /// [`ApprovalDecision::AllowOnce`] when the request does not
    /// [allow it](ApprovalRequest::allow_always).
    AlwaysOnSite,
    /// Run this call, and calls for the same reasons until the running task ends.
    AllowForTask,
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

    /// A fresh random nonce for the next [`ApprovalRequest`]. Override it with the platform's
    /// random source (the extension uses `crypto.getRandomValues`); the default mixes std's
    /// randomly keyed hasher with a counter, which has no randomness on `wasm32-unknown-unknown`.
    fn nonce(&self) -> String {
        use std::hash::{BuildHasher, Hasher};
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let state = std::collections::hash_map::RandomState::new();
        let mut out = String::new();
        for round in 0..2u64 {
            let mut hasher = state.build_hasher();
            hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
            hasher.write_u64(round);
            out.push_str(&format!("{:016x}", hasher.finish()));
        }
        out
    }
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
            gg_fields::words("cardNumber_2 XMLHttp"),
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

    /// The widget's `tools="read"` level (`gg_vocab::READ_TOOLS`) holds only tools this gate
    /// classes as reads, and `act` adds only acting tools.
    #[test]
    fn the_read_level_is_the_gates_reads() {
        let args = |tool: gg_vocab::Tool| match tool {
            gg_vocab::Tool::ReadPageContent => json!({"format": "text"}),
            gg_vocab::Tool::ScrollPage => json!({"direction": "down"}),
            gg_vocab::Tool::ClickElement => json!({"ref": "e1"}),
            gg_vocab::Tool::TypeText => json!({"ref": "e1", "text": "x"}),
            gg_vocab::Tool::RunJavascript => json!({"code": "1"}),
            _ => json!({}),
        };
        for tool in gg_vocab::READ_TOOLS {
            let class = classify_builtin(&parse(tool.name(), args(tool)), "https://a.test", None);
            assert_eq!(class.class, RiskClass::Read, "{}", tool.name());
        }
        for tool in gg_vocab::ACT_TOOLS {
            if !gg_vocab::READ_TOOLS.contains(&tool) {
                let class =
                    classify_builtin(&parse(tool.name(), args(tool)), "https://a.test", None);
                assert_ne!(class.class, RiskClass::Read, "{}", tool.name());
            }
        }
        assert!(
            gg_vocab::READ_TOOLS
                .iter()
                .all(|t| gg_vocab::ACT_TOOLS.contains(t))
        );
    }

    // ---- Classification from real-looking markup ------------------------------------------

    /// One element of a parsed snippet.
    #[derive(Debug, Default, Clone)]
    struct Node {
        tag: String,
        attrs: Vec<(String, String)>,
        text: String,
        parents: Vec<usize>,
    }

    impl Node {
        fn attr(&self, name: &str) -> Option<String> {
            self.attrs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    /// A tiny HTML reader for test snippets: tags, quoted attributes, text; no comments.
    fn parse_markup(markup: &str) -> Vec<Node> {
        let mut nodes: Vec<Node> = Vec::new();
        let mut stack: Vec<usize> = Vec::new();
        let mut rest = markup;
        const VOID: &[&str] = &["input", "img", "br", "hr", "meta"];
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("</") {
                let end = after.find('>').expect("closing >");
                stack.pop();
                rest = &after[end + 1..];
            } else if let Some(after) = rest.strip_prefix('<') {
                let end = after.find('>').expect(">");
                let inside = after[..end].trim_end_matches('/');
                let (tag, mut attrs_text) = inside.split_once(' ').unwrap_or((inside, ""));
                let mut attrs = Vec::new();
                loop {
                    attrs_text = attrs_text.trim_start();
                    if attrs_text.is_empty() {
                        break;
                    }
                    let name_end = attrs_text
                        .find(|c: char| c == '=' || c.is_whitespace())
                        .unwrap_or(attrs_text.len());
                    let name = attrs_text[..name_end].to_ascii_lowercase();
                    attrs_text = &attrs_text[name_end..];
                    let value = if let Some(v) = attrs_text.strip_prefix('=') {
                        let quote = v.chars().next().expect("quote");
                        let close = v[1..].find(quote).expect("closing quote") + 1;
                        attrs_text = &v[close + 1..];
                        v[1..close].to_owned()
                    } else {
                        String::new()
                    };
                    attrs.push((name, value));
                }
                let tag = tag.to_ascii_lowercase();
                nodes.push(Node {
                    tag: tag.clone(),
                    attrs,
                    text: String::new(),
                    parents: stack.clone(),
                });
                if !VOID.contains(&tag.as_str()) && !after[..end].ends_with('/') {
                    stack.push(nodes.len() - 1);
                }
                rest = &after[end + 1..];
            } else {
                let end = rest.find('<').unwrap_or(rest.len());
                let text = rest[..end].trim();
                if !text.is_empty() {
                    for &i in &stack {
                        if !nodes[i].text.is_empty() {
                            nodes[i].text.push(' ');
                        }
                        nodes[i].text.push_str(text);
                    }
                }
                rest = &rest[end..];
            }
        }
        nodes
    }

    const PAGE: &str = "https://shop.test/account";

    fn absolute(url: &str) -> String {
        let kept = ["mailto:", "tel:", "#", "javascript:"];
        if url.contains("://") || kept.iter().any(|k| url.starts_with(k)) {
            url.to_owned()
        } else if url.starts_with('/') {
            format!("https://shop.test{url}")
        } else if url.is_empty() {
            PAGE.to_owned()
        } else {
            format!("https://shop.test/{url}")
        }
    }

    fn field_of(nodes: &[Node], i: usize) -> FieldFacts {
        let n = &nodes[i];
        let id = n.attr("id");
        let label = id.as_ref().and_then(|id| {
            nodes
                .iter()
                .find(|l| l.tag == "label" && l.attr("for").as_deref() == Some(id))
                .map(|l| l.text.clone())
        });
        let input_type = match n.tag.as_str() {
            "input" => Some(
                n.attr("type")
                    .unwrap_or_else(|| "text".into())
                    .to_ascii_lowercase(),
            ),
            "button" => Some(
                n.attr("type")
                    .unwrap_or_else(|| "submit".into())
                    .to_ascii_lowercase(),
            ),
            _ => n.attr("type"),
        };
        let text = match (n.tag.as_str(), input_type.as_deref()) {
            ("input", Some("submit" | "button" | "reset")) => n.attr("value"),
            _ => (!n.text.is_empty()).then(|| n.text.clone()),
        };
        FieldFacts {
            tag: n.tag.clone(),
            input_type,
            autocomplete: n.attr("autocomplete"),
            name: n.attr("name"),
            id,
            label,
            placeholder: n.attr("placeholder"),
            aria_label: n.attr("aria-label"),
            text,
            hidden: n.attr("hidden").is_some()
                || n.attr("style")
                    .is_some_and(|s| s.replace(' ', "").contains("display:none")),
        }
    }

    /// The facts a content script would give about the element marked `data-target`.
    fn facts_from_markup(markup: &str) -> ElementFacts {
        let nodes = parse_markup(markup);
        let target = nodes
            .iter()
            .position(|n| n.attr("data-target").is_some())
            .expect("a data-target element");
        let n = &nodes[target];
        let form_index = n
            .parents
            .iter()
            .rev()
            .copied()
            .find(|&p| nodes[p].tag == "form");
        let form = form_index.map(|f| FormFacts {
            action: Some(absolute(&nodes[f].attr("action").unwrap_or_default())),
            method: Some(
                nodes[f]
                    .attr("method")
                    .unwrap_or_else(|| "get".into())
                    .to_ascii_lowercase(),
            ),
            fields: (0..nodes.len())
                .filter(|&i| {
                    nodes[i].parents.contains(&f)
                        && matches!(nodes[i].tag.as_str(), "input" | "select" | "textarea")
                })
                .map(|i| field_of(&nodes, i))
                .collect(),
        });
        let field = field_of(&nodes, target);
        let is_submit = form.is_some()
            && matches!(
                (n.tag.as_str(), field.input_type.as_deref()),
                ("button", Some("submit")) | ("input", Some("submit" | "image"))
            );
        let link_href = std::iter::once(target)
            .chain(n.parents.iter().rev().copied())
            .find(|&i| nodes[i].tag == "a" && nodes[i].attr("href").is_some())
            .map(|i| absolute(&nodes[i].attr("href").unwrap_or_default()));
        ElementFacts {
            field,
            is_submit,
            form,
            link_href,
            identity: Some(format!("el-{target}")),
        }
    }

    /// The short names of the reasons, for compact expectations.
    fn reason_names(class: &Classification) -> Vec<String> {
        class
            .reasons
            .iter()
            .map(|r| match r {
                SensitiveReason::RunJavascript => "js".to_owned(),
                SensitiveReason::TypeIntoSensitiveField { field } => format!("type:{field:?}"),
                SensitiveReason::SubmitSensitiveForm { .. } => "submit-secrets".to_owned(),
                SensitiveReason::SubmitForm { method } => format!("submit:{method}"),
                SensitiveReason::Consequential { action, .. } => format!("{action:?}"),
                SensitiveReason::LeaveSite { destination } => format!("leave:{destination}"),
                SensitiveReason::UnclassifiedTool { name } => format!("tool:{name}"),
                SensitiveReason::UnverifiedElement => "unverified".to_owned(),
            })
            .collect()
    }

    /// (markup with the target marked, the call, the expected reasons; empty = an ordinary act).
    const MARKUP_CASES: &[(&str, &str, &[&str])] = &[
        // Plain acts.
        (
            r#"<button type="button" data-target>Show details</button>"#,
            "click",
            &[],
        ),
        (r#"<a href="/cart" data-target>Cart (2)</a>"#, "click", &[]),
        (
            r#"<nav><a href="/orders/123"><span data-target>View order #123</span></a></nav>"#,
            "click",
            &[],
        ),
        (
            r#"<button type="button" aria-expanded="false" data-target>Menu</button>"#,
            "click",
            &[],
        ),
        (r#"<div role="tab" data-target>Reviews</div>"#, "click", &[]),
        (
            r##"<a href="#reviews" data-target>Jump to reviews</a>"##,
            "click",
            &[],
        ),
        (
            r#"<button type="button" data-target>Add to cart</button>"#,
            "click",
            &[],
        ),
        (
            r#"<label for="q">Search</label><input id="q" name="q" type="search" data-target>"#,
            "type",
            &[],
        ),
        (
            r#"<form action="/comments" method="post"><textarea name="body" data-target></textarea></form>"#,
            "type",
            &[],
        ),
        (
            r#"<input type="email" name="email" autocomplete="email" data-target>"#,
            "type",
            &[],
        ),
        (
            r#"<input type="checkbox" name="newsletter" data-target>"#,
            "click",
            &[],
        ),
        (
            r#"<button type="button" data-target>Paying guests</button>"#,
            "click",
            &[],
        ),
        // Destructive and purchasing texts, labels, aria-labels, in several languages.
        (
            r#"<button type="button" class="btn-danger" data-target>Delete account</button>"#,
            "click",
            &["Destructive"],
        ),
        (
            r#"<button type="button" aria-label="Remove item" data-target><svg></svg></button>"#,
            "click",
            &["Destructive"],
        ),
        (
            r#"<a href="/account/close" data-target>Close my account</a>"#,
            "click",
            &["Destructive"],
        ),
        (
            r#"<div role="button" data-target>Löschen</div>"#,
            "click",
            &["Destructive"],
        ),
        (
            r#"<button type="button" data-target>Supprimer la conversation</button>"#,
            "click",
            &["Destructive"],
        ),
        (
            r#"<button type="button" data-target>Eliminar</button>"#,
            "click",
            &["Destructive"],
        ),
        (
            r#"<span role="button" data-target>Unsubscribe</span>"#,
            "click",
            &["Destructive"],
        ),
        (
            r#"<button type="button" id="buy-now" data-target>Buy now</button>"#,
            "click",
            &["Purchase"],
        ),
        (
            r#"<a href="/checkout" class="btn" data-target>Proceed to checkout</a>"#,
            "click",
            &["Purchase"],
        ),
        (
            r#"<button type="button" data-target>Jetzt kaufen</button>"#,
            "click",
            &["Purchase"],
        ),
        (
            r#"<button type="button" data-target>Zahlungspflichtig bestellen</button>"#,
            "click",
            &["Purchase"],
        ),
        (
            r#"<button type="button" data-target>Payer 49,00 €</button>"#,
            "click",
            &["Purchase"],
        ),
        (
            r#"<div class="pay" role="button" aria-label="Pay with card" data-target></div>"#,
            "click",
            &["Purchase"],
        ),
        (
            r#"<button type="button" data-target>Subscribe for $9.99/month</button>"#,
            "click",
            &["Purchase"],
        ),
        (
            r#"<button type="button" data-target>Send money</button>"#,
            "click",
            &["Send"],
        ),
        (
            r#"<button type="button" data-target>Überweisen</button>"#,
            "click",
            &["Send"],
        ),
        (
            r#"<button type="button" data-target>Confirm transfer</button>"#,
            "click",
            &["Send"],
        ),
        (
            r#"<button type="button" data-target>Bestätigen</button>"#,
            "click",
            &["Confirm"],
        ),
        (
            r#"<button type="button" data-target>Approve</button>"#,
            "click",
            &["Confirm"],
        ),
        // Submits: any form, any method, a submit input, Enter in a field.
        (
            r#"<form action="/search"><input name="q"><button data-target>Search</button></form>"#,
            "click",
            &["submit:get"],
        ),
        (
            r#"<form action="/profile" method="POST"><input name="bio"><input type="submit" value="Save" data-target></form>"#,
            "click",
            &["submit:post"],
        ),
        (
            r#"<form action="/cart" method="post"><button type="submit" data-target>Place order</button></form>"#,
            "click",
            &["submit:post", "Purchase"],
        ),
        (
            r#"<form action="/messages" method="post"><textarea name="body"></textarea><button data-target>Send</button></form>"#,
            "click",
            &["submit:post", "Send"],
        ),
        (
            r#"<form action="/account/delete" method="post"><input type="hidden" name="csrf" value="x"><button data-target>Delete</button></form>"#,
            "click",
            &["submit:post", "Destructive"],
        ),
        (
            r#"<form action="/search"><input name="q" data-target></form>"#,
            "type+submit",
            &["submit:get"],
        ),
        (
            r#"<input name="chat" placeholder="Message" data-target>"#,
            "type+submit",
            &["submit:"],
        ),
        (
            r#"<form action="/login" method="post"><input name="user"><input type="password" name="pw"><button data-target>Sign in</button></form>"#,
            "click",
            &["submit:post", "submit-secrets"],
        ),
        (
            r#"<form action="/login" method="post"><input name="user" data-target><input type="password" name="pw"></form>"#,
            "type+submit",
            &["submit:post", "submit-secrets"],
        ),
        (
            r#"<form method="post"><input name="q"><button type="button" data-target>Show password</button></form>"#,
            "click",
            &[],
        ),
        // Secret and hidden fields.
        (
            r#"<input type="password" name="pw" autocomplete="current-password" data-target>"#,
            "type",
            &["type:Password"],
        ),
        (
            r#"<input type="text" name="code" autocomplete="one-time-code" inputmode="numeric" data-target>"#,
            "type",
            &["type:OneTimeCode"],
        ),
        (
            r#"<label for="cc">Card number</label><input id="cc" inputmode="numeric" data-target>"#,
            "type",
            &["type:PaymentCard"],
        ),
        (
            r#"<input name="cvc" maxlength="4" data-target>"#,
            "type",
            &["type:PaymentCard"],
        ),
        (
            r#"<input autocomplete="cc-exp" placeholder="MM / YY" data-target>"#,
            "type",
            &["type:PaymentCard"],
        ),
        (
            r#"<input name="iban" aria-label="IBAN" data-target>"#,
            "type",
            &["type:PaymentCard"],
        ),
        (
            r#"<input type="hidden" name="csrf_token" data-target>"#,
            "type",
            &["type:Hidden"],
        ),
        (
            r#"<input name="redirect" style="display: none" data-target>"#,
            "type",
            &["type:Hidden"],
        ),
        (
            r#"<input type="tel" name="otp" data-target>"#,
            "type",
            &["type:OneTimeCode"],
        ),
        // Leaving the origin.
        (
            r#"<a href="https://evil.test/win" data-target>Claim your prize</a>"#,
            "click",
            &["leave:https://evil.test"],
        ),
        (
            r#"<a href="http://shop.test/insecure" data-target>Old page</a>"#,
            "click",
            &["leave:http://shop.test"],
        ),
        (
            r#"<a href="https://www.shop.test/" data-target>Home</a>"#,
            "click",
            &["leave:https://www.shop.test"],
        ),
        (
            r#"<a href="mailto:help@shop.test" data-target>Email us</a>"#,
            "click",
            &["leave:mailto:help@shop.test"],
        ),
        (
            r#"<form action="https://collector.test/q" method="post"><input name="q"><button data-target>Go</button></form>"#,
            "click",
            &["submit:post", "leave:https://collector.test"],
        ),
        (
            r#"<a href="https://bank.test/transfer"><span data-target>Transfer now</span></a>"#,
            "click",
            &["Send", "leave:https://bank.test"],
        ),
    ];

    #[test]
    fn classifies_real_looking_markup() {
        assert!(MARKUP_CASES.len() >= 40, "{} cases", MARKUP_CASES.len());
        for (markup, action, expected) in MARKUP_CASES {
            let facts = facts_from_markup(markup);
            let call = match *action {
                "click" => parse("click_element", json!({"ref": "e1"})),
                "type" => parse("type_text", json!({"ref": "e1", "text": "x"})),
                "type+submit" => parse(
                    "type_text",
                    json!({"ref": "e1", "text": "x", "submit": true}),
                ),
                other => panic!("unknown action {other}"),
            };
            let class = classify_builtin(&call, PAGE, Some(&facts));
            let names = reason_names(&class);
            assert_eq!(names, *expected, "{markup}\n{facts:#?}");
            let want = if expected.is_empty() {
                RiskClass::Act
            } else {
                RiskClass::Sensitive
            };
            assert_eq!(class.class, want, "{markup}");
        }
    }

    #[test]
    fn unverified_elements_and_consequential_labels_for_the_user() {
        let click = parse("click_element", json!({"ref": "e1"}));
        assert_eq!(
            classify_builtin(&click, PAGE, None).reasons,
            [SensitiveReason::UnverifiedElement]
        );
        let facts = facts_from_markup(
            r#"<button type="button" data-target>  Delete   ALL photos!</button>"#,
        );
        let class = classify_builtin(&click, PAGE, Some(&facts));
        assert_eq!(
            class.reasons,
            [SensitiveReason::Consequential {
                action: ActionKind::Destructive,
                label: "delete all photos".into()
            }]
        );
        let request = ApprovalRequest::new(
            1,
            PAGE,
            ToolCall::from_value("click_element", json!({"ref": "e1"})),
            class.reasons,
        );
        assert!(request.allow_always);
        assert_eq!(
            request.summary,
            "Gemma wants to click “delete all photos” (it may delete or remove something) on https://shop.test/account."
        );
        let js = ApprovalRequest::new(
            2,
            PAGE,
            ToolCall::from_value("run_javascript", json!({"code": "1"})),
            vec![SensitiveReason::RunJavascript],
        );
        assert!(!js.allow_always, "run_javascript is never allowed for good");
    }

    #[test]
    fn nonces_are_long_and_differ() {
        let a = DenyAll.nonce();
        let b = DenyAll.nonce();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
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
