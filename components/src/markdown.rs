//! Markdown for untrusted model output.
//!
//! `pulldown-cmark` events are turned straight into Yew virtual nodes; no HTML string is ever parsed
//! by the browser. Hence:
//! - raw HTML (blocks and inline) becomes text nodes: `<img onerror=...>` and `<script>` show as text;
//! - links show where they go (the host after the text unless the text is the address, the full
//!   address on hover, never the model's own title);
//! - links keep an `href` only for `http:`, `https:` and `mailto:`; other schemes (`javascript:`,
//!   `data:`, `vbscript:`...) render the link text without a link;
//! - images are never loaded (a remote image would leak data through its URL: a prompt-injected
//!   page could make the model write one); they become a link the user can choose to open.
//!
//! Because the output is a virtual DOM, re-rendering a growing answer only touches what changed
//! (usually the last text node), which keeps streaming free of flicker.
//!
//! Two steps: [`parse`] turns the source into a flat list of [`MdEvent`]s (owned, serializable,
//! links already checked), [`render_events`] turns such a list into virtual DOM. [`render`] is
//! both. The list is a closed vocabulary: rendering any list, wherever it came from, still gives
//! only the elements above, text nodes, and `href`s that pass [`safe_href`] (checked again).

use std::rc::Rc;

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag};
use serde::{Deserialize, Serialize};
use yew::prelude::*;
use yew::virtual_dom::VText;

use crate::code_block::CodeBlock;

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
    fn tag(self) -> &'static str {
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

enum Kind {
    Root,
    /// A plain element with no attributes.
    Element(&'static str),
    CodeBlock {
        lang: Option<String>,
        code: String,
    },
    Link {
        href: Option<String>,
        /// The link's plain text, to tell whether it already shows where it goes.
        text: String,
    },
    Image {
        href: Option<String>,
        alt: String,
    },
    HtmlBlock,
    Table,
    TableHead,
    TableRow,
    TableCell,
}

struct Frame {
    kind: Kind,
    children: Vec<Html>,
}

struct Builder {
    stack: Vec<Frame>,
    in_table_head: bool,
}

impl Builder {
    fn push(&mut self, kind: Kind) {
        self.stack.push(Frame {
            kind,
            children: Vec::new(),
        });
    }

    fn top(&mut self) -> &mut Frame {
        // The root frame is never popped while events arrive.
        let last = self.stack.len() - 1;
        &mut self.stack[last]
    }

    fn child(&mut self, node: Html) {
        self.top().children.push(node);
    }

    fn text(&mut self, text: &str) {
        match &mut self.top().kind {
            Kind::CodeBlock { code, .. } => code.push_str(text),
            Kind::Image { alt, .. } => alt.push_str(text),
            _ => {
                if let Some(Kind::Link { text: link, .. }) = self
                    .stack
                    .iter_mut()
                    .rev()
                    .map(|f| &mut f.kind)
                    .find(|k| matches!(k, Kind::Link { .. }))
                {
                    link.push_str(text);
                }
                self.child(Html::VText(VText::new(text.to_owned())));
            }
        }
    }

    fn pop(&mut self) {
        if self.stack.len() <= 1 {
            return;
        }
        let Some(frame) = self.stack.pop() else {
            return;
        };
        let children = frame.children;
        let node = match frame.kind {
            Kind::Root => return,
            Kind::Element(tag) => html! { <@{tag}>{ for children }</@> },
            Kind::CodeBlock { lang, code } => {
                html! { <CodeBlock code={AttrValue::from(code)} lang={lang.map(AttrValue::from)} /> }
            }
            Kind::Link {
                href: Some(href),
                text,
            } => {
                // The destination is always in view: the full address on hover (never the
                // model's own title) and the host after the text unless the text is the address.
                let shown = destination(&href);
                let says_where = {
                    let text = text.trim().to_ascii_lowercase();
                    let href = href.trim().to_ascii_lowercase();
                    text == href || text == shown || text == href.trim_end_matches('/')
                };
                html! {
                    <>
                        <a href={href.clone()} title={href} target="_blank" rel="noopener noreferrer nofollow">{ for children }</a>
                        if !says_where {
                            <span class="gg-md-dest">{ format!(" ({shown})") }</span>
                        }
                    </>
                }
            }
            Kind::Link { href: None, .. } => html! {
                <span class="gg-md-blocked" title="Link removed: unsafe address">{ for children }</span>
            },
            Kind::Image { href, alt } => {
                let label = if alt.trim().is_empty() {
                    "image".to_owned()
                } else {
                    alt
                };
                match href {
                    Some(href) => html! {
                        <a href={href} target="_blank" rel="noopener noreferrer nofollow" title="Image not loaded; opens in a new tab">
                            { format!("[image: {label}]") }
                        </a>
                    },
                    None => {
                        html! { <span class="gg-md-blocked">{ format!("[image: {label}]") }</span> }
                    }
                }
            }
            Kind::HtmlBlock => html! { <div class="gg-md-raw">{ for children }</div> },
            Kind::Table => html! { <table>{ for children }</table> },
            Kind::TableHead => {
                self.in_table_head = false;
                html! { <thead><tr>{ for children }</tr></thead> }
            }
            Kind::TableRow => html! { <tr>{ for children }</tr> },
            Kind::TableCell => {
                if self.in_table_head {
                    html! { <th>{ for children }</th> }
                } else {
                    html! { <td>{ for children }</td> }
                }
            }
        };
        self.child(node);
    }

    fn start(&mut self, tag: MdTag) {
        // Whatever the list's origin, an `href` is only ever a safe one.
        let safe = |href: Option<String>| href.as_deref().and_then(safe_href);
        let kind = match tag {
            MdTag::Element(element) => Kind::Element(element.tag()),
            MdTag::CodeBlock { lang } => Kind::CodeBlock {
                lang,
                code: String::new(),
            },
            MdTag::Link { href } => Kind::Link {
                href: safe(href),
                text: String::new(),
            },
            MdTag::Image { href } => Kind::Image {
                href: safe(href),
                alt: String::new(),
            },
            MdTag::HtmlBlock => Kind::HtmlBlock,
            MdTag::Table => Kind::Table,
            MdTag::TableHead => {
                self.in_table_head = true;
                Kind::TableHead
            }
            MdTag::TableRow => Kind::TableRow,
            MdTag::TableCell => Kind::TableCell,
        };
        self.push(kind);
    }
}

/// Renders parsed Markdown ([`parse`]) as inert virtual DOM. An `End` with nothing open is
/// ignored and containers left open are closed, so any list renders.
pub fn render_events(events: &[MdEvent]) -> Html {
    let mut builder = Builder {
        stack: Vec::new(),
        in_table_head: false,
    };
    builder.push(Kind::Root);
    for event in events {
        match event {
            MdEvent::Start(tag) => builder.start(tag.clone()),
            MdEvent::End => builder.pop(),
            MdEvent::Text(text) => builder.text(text),
            MdEvent::Code(code) => builder.child(html! { <code>{ code.clone() }</code> }),
            MdEvent::HardBreak => builder.child(html! { <br /> }),
            MdEvent::Rule => builder.child(html! { <hr /> }),
            MdEvent::TaskListMarker(checked) => {
                let checked = *checked;
                builder.child(html! {
                    <input type="checkbox" disabled=true checked={checked} aria-label={if checked { "done" } else { "not done" }} />
                })
            }
        }
    }
    // Unclosed frames cannot happen with pulldown-cmark, but fold them anyway.
    while builder.stack.len() > 1 {
        builder.pop();
    }
    let root = builder.stack.pop().map(|f| f.children).unwrap_or_default();
    root.into_iter().collect()
}

/// Renders untrusted Markdown as inert virtual DOM (see the module docs).
pub fn render(source: &str) -> Html {
    render_events(&parse(source))
}

/// Properties of [`Markdown`].
#[derive(Clone, Properties, PartialEq)]
pub struct MarkdownProps {
    /// Model text in Markdown; raw HTML in it is shown as text.
    pub source: Rc<str>,
}

/// Markdown as a component: re-parses only when the source changes.
#[function_component(Markdown)]
pub fn markdown(props: &MarkdownProps) -> Html {
    html! { <div class="gg-md">{ render(&props.source) }</div> }
}

#[cfg(test)]
mod tests {
    use super::{MdElement, MdEvent, MdTag, destination, parse, render, render_events, safe_href};

    #[test]
    fn links_show_where_they_go() {
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
        let html = |md: &str| {
            futures::executor::block_on(
                yew::LocalServerRenderer::<Wrap>::with_props(WrapProps { md: md.into() }).render(),
            )
        };
        let shown = html("[your bank](https://bank.example@evil.example/login \"bank.example\")");
        assert!(shown.contains(" (evil.example)"), "{shown}");
        assert!(
            shown.contains("title=\"https://bank.example@evil.example/login\""),
            "{shown}"
        );
        assert!(!shown.contains("title=\"bank.example\""), "{shown}");
        // An address shown as itself needs no repeat.
        let plain = html("<https://a.example/>");
        assert!(!plain.contains("gg-md-dest"), "{plain}");
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
    fn any_event_list_renders_inert() {
        let html = |events: Vec<MdEvent>| {
            futures::executor::block_on(
                yew::LocalServerRenderer::<Events>::with_props(EventsProps { events }).render(),
            )
        };
        // A list made by someone else: the unsafe address is dropped again, an unmatched end is
        // ignored, an open container is closed, text stays text.
        let out = html(vec![
            MdEvent::End,
            MdEvent::Start(MdTag::Link {
                href: Some("javascript:alert(1)".into()),
            }),
            MdEvent::Text("<img src=x onerror=alert(1)>".into()),
            MdEvent::End,
            MdEvent::Start(MdTag::Image {
                href: Some("data:image/png;base64,AA".into()),
            }),
            MdEvent::Text("alt".into()),
        ]);
        assert!(!out.contains("javascript:"), "{out}");
        assert!(!out.contains("data:"), "{out}");
        assert!(!out.contains("<img"), "{out}");
        assert!(out.contains("&lt;img src=x onerror=alert(1)&gt;"), "{out}");
        assert!(out.contains("[image: alt]"), "{out}");
    }

    #[derive(yew::Properties, PartialEq)]
    struct EventsProps {
        events: Vec<MdEvent>,
    }

    #[yew::function_component(Events)]
    fn events(props: &EventsProps) -> yew::Html {
        render_events(&props.events)
    }

    #[derive(yew::Properties, PartialEq)]
    struct WrapProps {
        md: String,
    }

    #[yew::function_component(Wrap)]
    fn wrap(props: &WrapProps) -> yew::Html {
        render(&props.md)
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
