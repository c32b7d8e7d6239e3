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

use std::rc::Rc;

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
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
            Kind::TableHead => html! { <thead><tr>{ for children }</tr></thead> },
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

    fn start(&mut self, tag: Tag<'_>) {
        let kind = match tag {
            Tag::Paragraph => Kind::Element("p"),
            Tag::Heading { level, .. } => Kind::Element(match level {
                HeadingLevel::H1 => "h1",
                HeadingLevel::H2 => "h2",
                HeadingLevel::H3 => "h3",
                HeadingLevel::H4 => "h4",
                HeadingLevel::H5 => "h5",
                HeadingLevel::H6 => "h6",
            }),
            Tag::BlockQuote(_) => Kind::Element("blockquote"),
            Tag::CodeBlock(kind) => Kind::CodeBlock {
                lang: match kind {
                    CodeBlockKind::Fenced(info) => {
                        info.split_whitespace().next().map(str::to_owned)
                    }
                    CodeBlockKind::Indented => None,
                },
                code: String::new(),
            },
            Tag::HtmlBlock => Kind::HtmlBlock,
            Tag::List(Some(_)) => Kind::Element("ol"),
            Tag::List(None) => Kind::Element("ul"),
            Tag::Item => Kind::Element("li"),
            Tag::Table(_) => Kind::Table,
            Tag::TableHead => {
                self.in_table_head = true;
                Kind::TableHead
            }
            Tag::TableRow => Kind::TableRow,
            Tag::TableCell => Kind::TableCell,
            Tag::Emphasis => Kind::Element("em"),
            Tag::Strong => Kind::Element("strong"),
            Tag::Strikethrough => Kind::Element("del"),
            Tag::Superscript => Kind::Element("sup"),
            Tag::Subscript => Kind::Element("sub"),
            Tag::Link { dest_url, .. } => Kind::Link {
                href: safe_href(&dest_url),
                text: String::new(),
            },
            Tag::Image { dest_url, .. } => Kind::Image {
                href: safe_href(&dest_url),
                alt: String::new(),
            },
            // Not enabled in the parser options; kept as neutral containers if they ever appear.
            Tag::FootnoteDefinition(_)
            | Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition
            | Tag::MetadataBlock(_) => Kind::Element("div"),
        };
        self.push(kind);
    }

    fn end(&mut self, tag: TagEnd) {
        self.pop();
        if tag == TagEnd::TableHead {
            self.in_table_head = false;
        }
    }
}

/// Renders untrusted Markdown as inert virtual DOM (see the module docs).
pub fn render(source: &str) -> Html {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut builder = Builder {
        stack: Vec::new(),
        in_table_head: false,
    };
    builder.push(Kind::Root);
    for event in Parser::new_ext(source, options) {
        match event {
            Event::Start(tag) => builder.start(tag),
            Event::End(tag) => builder.end(tag),
            Event::Text(text) => builder.text(&text),
            Event::Code(code) => builder.child(html! { <code>{ code.into_string() }</code> }),
            // Raw HTML is shown as the text it is.
            Event::Html(raw) | Event::InlineHtml(raw) => builder.text(&raw),
            Event::InlineMath(math) | Event::DisplayMath(math) => builder.text(&math),
            Event::FootnoteReference(name) => builder.text(&format!("[^{name}]")),
            Event::SoftBreak => builder.text("\n"),
            Event::HardBreak => builder.child(html! { <br /> }),
            Event::Rule => builder.child(html! { <hr /> }),
            Event::TaskListMarker(checked) => builder.child(html! {
                <input type="checkbox" disabled=true checked={checked} aria-label={if checked { "done" } else { "not done" }} />
            }),
        }
    }
    // Unclosed frames cannot happen with pulldown-cmark, but fold them anyway.
    while builder.stack.len() > 1 {
        builder.pop();
    }
    let root = builder.stack.pop().map(|f| f.children).unwrap_or_default();
    root.into_iter().collect()
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
    use super::{destination, render, safe_href};

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
