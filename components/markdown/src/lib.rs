//! Untrusted Markdown (model output) as a flat list of [`MdEvent`]s: owned, serializable, a closed
//! vocabulary (plain elements, code, links, images, tables, text), with link addresses already
//! checked by [`safe_href`]. [`parse`] makes such a list with `pulldown-cmark`; the UI kit
//! (`gg_components::markdown`) renders any list as inert virtual DOM and checks addresses again,
//! so a list that crossed a thread boundary (the widget's worker parses for the page) is still
//! data, never markup.
//!
//! - Raw HTML (blocks and inline), math and footnote references become text.
//! - Links keep an address only for `http:`, `https:` and `mailto:` ([`safe_href`]).
//! - Images keep their (safe) address as a link target; they are never loaded by the renderer.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag};
use serde::{Deserialize, Serialize};

/// The URL if it is safe to put in an `href`; `None` for any other scheme or a URL with control
/// characters (which browsers strip, e.g. `java\tscript:`).
pub fn safe_href(url: &str) -> Option<String> {
    let trimmed = url.trim();
    if trimmed.chars().any(char::is_control) {
        return None;
    }
    let lower = trimmed.to_ascii_lowercase();
    ["https://", "http://", "mailto:"]
        .iter()
        .any(|scheme| lower.starts_with(scheme))
        .then(|| trimmed.to_owned())
}

/// Where a safe link goes, as shown next to it: the host of a web address (after any
/// `user@` part, which could pose as a host), the address of a `mailto:` link.
pub fn destination(href: &str) -> String {
    let href = href.trim();
    let lower = href.to_ascii_lowercase();
    if let Some(address) = lower.strip_prefix("mailto:") {
        return address.split('?').next().unwrap_or(address).to_owned();
    }
    let rest = lower
        .split_once("://")
        .map_or(lower.as_str(), |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#', '\\']).next().unwrap_or(rest);
    let host = authority.rsplit('@').next().unwrap_or(authority);
    host.to_owned()
}

/// One step of a parsed Markdown document (see [`parse`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MdEvent {
    /// Opens a container; closed by the matching [`MdEvent::End`].
    Start(MdTag),
    /// Closes the innermost open container.
    End,
    /// Text (raw HTML, math and footnote references are text too; a soft break is `"\n"`).
    Text(String),
    /// An inline code span.
    Code(String),
    HardBreak,
    Rule,
    /// A task list item's checkbox (shown disabled).
    TaskListMarker(bool),
}

/// A container of a parsed Markdown document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MdTag {
    /// An element without attributes.
    Element(MdElement),
    /// A code block; its text events are the code.
    CodeBlock {
        lang: Option<String>,
    },
    /// A link; `href` is `None` when the address is not safe ([`safe_href`]).
    Link {
        href: Option<String>,
    },
    /// An image (never loaded); its text events are the alt text.
    Image {
        href: Option<String>,
    },
    /// A raw HTML block, shown as text.
    HtmlBlock,
    Table,
    TableHead,
    TableRow,
    TableCell,
}

/// The plain elements Markdown renders to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MdElement {
    P,
    H1,
    H2,
    H3,
    H4,
    H5,
    H6,
    Blockquote,
    Ol,
    Ul,
    Li,
    Em,
    Strong,
    Del,
    Sup,
    Sub,
    /// Neutral container for constructs the parser options leave off.
    Div,
}

impl MdElement {
    /// The HTML element name.
    pub fn tag(self) -> &'static str {
        match self {
            Self::P => "p",
            Self::H1 => "h1",
            Self::H2 => "h2",
            Self::H3 => "h3",
            Self::H4 => "h4",
            Self::H5 => "h5",
            Self::H6 => "h6",
            Self::Blockquote => "blockquote",
            Self::Ol => "ol",
            Self::Ul => "ul",
            Self::Li => "li",
            Self::Em => "em",
            Self::Strong => "strong",
            Self::Del => "del",
            Self::Sup => "sup",
            Self::Sub => "sub",
            Self::Div => "div",
        }
    }
}

fn tag_of(tag: Tag<'_>) -> MdTag {
    let element = MdTag::Element;
    match tag {
        Tag::Paragraph => element(MdElement::P),
        Tag::Heading { level, .. } => element(match level {
            HeadingLevel::H1 => MdElement::H1,
            HeadingLevel::H2 => MdElement::H2,
            HeadingLevel::H3 => MdElement::H3,
            HeadingLevel::H4 => MdElement::H4,
            HeadingLevel::H5 => MdElement::H5,
            HeadingLevel::H6 => MdElement::H6,
        }),
        Tag::BlockQuote(_) => element(MdElement::Blockquote),
        Tag::CodeBlock(kind) => MdTag::CodeBlock {
            lang: match kind {
                CodeBlockKind::Fenced(info) => info.split_whitespace().next().map(str::to_owned),
                CodeBlockKind::Indented => None,
            },
        },
        Tag::HtmlBlock => MdTag::HtmlBlock,
        Tag::List(Some(_)) => element(MdElement::Ol),
        Tag::List(None) => element(MdElement::Ul),
        Tag::Item => element(MdElement::Li),
        Tag::Table(_) => MdTag::Table,
        Tag::TableHead => MdTag::TableHead,
        Tag::TableRow => MdTag::TableRow,
        Tag::TableCell => MdTag::TableCell,
        Tag::Emphasis => element(MdElement::Em),
        Tag::Strong => element(MdElement::Strong),
        Tag::Strikethrough => element(MdElement::Del),
        Tag::Superscript => element(MdElement::Sup),
        Tag::Subscript => element(MdElement::Sub),
        Tag::Link { dest_url, .. } => MdTag::Link {
            href: safe_href(&dest_url),
        },
        Tag::Image { dest_url, .. } => MdTag::Image {
            href: safe_href(&dest_url),
        },
        // Not enabled in the parser options; kept as neutral containers if they ever appear.
        Tag::FootnoteDefinition(_)
        | Tag::DefinitionList
        | Tag::DefinitionListTitle
        | Tag::DefinitionListDefinition
        | Tag::MetadataBlock(_) => element(MdElement::Div),
    }
}

/// Parses untrusted Markdown (CommonMark with tables, strikethrough and task lists) into events;
/// adjacent text is joined.
pub fn parse(source: &str) -> Vec<MdEvent> {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut events: Vec<MdEvent> = Vec::new();
    let text = |events: &mut Vec<MdEvent>, t: &str| match events.last_mut() {
        Some(MdEvent::Text(last)) => last.push_str(t),
        _ => events.push(MdEvent::Text(t.to_owned())),
    };
    for event in Parser::new_ext(source, options) {
        match event {
            Event::Start(tag) => events.push(MdEvent::Start(tag_of(tag))),
            Event::End(_) => events.push(MdEvent::End),
            Event::Text(t) => text(&mut events, &t),
            Event::Code(code) => events.push(MdEvent::Code(code.into_string())),
            // Raw HTML is shown as the text it is.
            Event::Html(raw) | Event::InlineHtml(raw) => text(&mut events, &raw),
            Event::InlineMath(math) | Event::DisplayMath(math) => text(&mut events, &math),
            Event::FootnoteReference(name) => text(&mut events, &format!("[^{name}]")),
            Event::SoftBreak => text(&mut events, "\n"),
            Event::HardBreak => events.push(MdEvent::HardBreak),
            Event::Rule => events.push(MdEvent::Rule),
            Event::TaskListMarker(checked) => events.push(MdEvent::TaskListMarker(checked)),
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::{MdElement, MdEvent, MdTag, destination, parse, safe_href};

    #[test]
    fn destinations_are_hosts() {
        assert_eq!(destination("https://a.example/x?y#z"), "a.example");
        assert_eq!(
            destination("HTTPS://Bank.Example:8443/login"),
            "bank.example:8443"
        );
        // A user part is not the host.
        assert_eq!(
            destination("https://bank.example@evil.example/"),
            "evil.example"
        );
        assert_eq!(
            destination("https://evil.example\\@bank.example/"),
            "evil.example"
        );
        assert_eq!(destination("mailto:a@b.example?subject=x"), "a@b.example");
    }

    #[test]
    fn parsed_events_are_plain_data() {
        let events = parse("A *b* &amp; [c](javascript:x)\n\n```rs\nfn f() {}\n```\n\n<b>x</b>");
        assert_eq!(
            &events[..5],
            &[
                MdEvent::Start(MdTag::Element(MdElement::P)),
                MdEvent::Text("A ".into()),
                MdEvent::Start(MdTag::Element(MdElement::Em)),
                MdEvent::Text("b".into()),
                MdEvent::End,
            ]
        );
        // Entities are decoded and adjacent text joined; the unsafe link has no address.
        assert_eq!(events[5], MdEvent::Text(" & ".into()));
        assert_eq!(events[6], MdEvent::Start(MdTag::Link { href: None }));
        assert!(events.contains(&MdEvent::Start(MdTag::CodeBlock {
            lang: Some("rs".into())
        })));
        assert!(events.contains(&MdEvent::Text("<b>x</b>".into())));
        let json = serde_json::to_string(&events).expect("json");
        let back: Vec<MdEvent> = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, events);
    }

    #[test]
    fn only_web_and_mail_links_are_kept() {
        assert_eq!(
            safe_href("https://a.example/x").as_deref(),
            Some("https://a.example/x")
        );
        assert_eq!(
            safe_href(" HTTP://a.example ").as_deref(),
            Some("HTTP://a.example")
        );
        assert_eq!(
            safe_href("mailto:a@b.example").as_deref(),
            Some("mailto:a@b.example")
        );
        for bad in [
            "javascript:alert(1)",
            "JaVaScRiPt:alert(1)",
            " javascript:alert(1)",
            "java\tscript:alert(1)",
            "https://ok\n.example",
            "data:text/html,<script>alert(1)</script>",
            "vbscript:msgbox",
            "/relative",
            "//evil.example",
            "",
        ] {
            assert_eq!(safe_href(bad), None, "{bad:?} must be rejected");
        }
    }
}
