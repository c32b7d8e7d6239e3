//! Markdown for untrusted model output.
//!
//! Parsed events (`pulldown-cmark`'s, as [`MdEvent`]s) are turned straight into Yew virtual nodes;
//! no HTML string is ever parsed by the browser. Hence:
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
//! Two steps: [`parse`] (crate `gg-markdown`) turns the source into a flat list of [`MdEvent`]s
//! (owned, serializable, links already checked), [`render_events`] turns such a list into virtual
//! DOM. [`render`] is both. The list is a closed vocabulary: rendering any list, wherever it came
//! from, still gives only the elements above, text nodes, and `href`s that pass [`safe_href`]
//! (checked again). The [`Markdown`] component parses as its host says ([`MarkdownParser`]): here,
//! or elsewhere — the widget's worker parses for the page, whose main thread links no parser.

use std::rc::Rc;

pub use gg_markdown::{MdElement, MdEvent, MdTag, destination, parse, safe_href};
use yew::prelude::*;
use yew::virtual_dom::VText;

use crate::code_block::CodeBlock;

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

/// How [`Markdown`] components get the events of their source. The host of the chat chooses
/// ([`crate::ChatOverlay`]'s and [`crate::GemApp`]'s `markdown` prop, given to the messages as a
/// context): there is no default, so a build that only ever asks elsewhere never links a parser.
#[derive(Clone)]
pub enum MarkdownParser {
    /// Parses on this thread ([`MarkdownParser::here`]: the extension's overlay, the demo site).
    Here(fn(&str) -> Vec<MdEvent>),
    /// Asks elsewhere: called with a source and where its events go, once (the widget: its worker
    /// parses, off the page's main thread). A component has at most one question out; while it
    /// waits it shows the events of its previous source (plain text before the first answer).
    Elsewhere(Callback<(Rc<str>, Callback<Vec<MdEvent>>)>),
}

impl MarkdownParser {
    /// Parsing here with [`parse`].
    pub fn here() -> Self {
        Self::Here(parse)
    }
}

impl PartialEq for MarkdownParser {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Here(a), Self::Here(b)) => std::ptr::fn_addr_eq(*a, *b),
            (Self::Elsewhere(a), Self::Elsewhere(b)) => a == b,
            _ => false,
        }
    }
}

/// Properties of [`Markdown`].
#[derive(Clone, Properties, PartialEq)]
pub struct MarkdownProps {
    /// Model text in Markdown; raw HTML in it is shown as text.
    pub source: Rc<str>,
}

/// The events a component received for a source, and its question out.
#[derive(Default)]
struct Asked {
    /// The source asked about and not answered yet.
    out: Option<Rc<str>>,
    /// The newest source, to ask about when the answer comes (sources change while one is out).
    next: Option<Rc<str>>,
}

type Received = Option<(Rc<str>, Rc<Vec<MdEvent>>)>;

fn ask(
    elsewhere: Callback<(Rc<str>, Callback<Vec<MdEvent>>)>,
    asked: Rc<std::cell::RefCell<Asked>>,
    received: UseStateSetter<Received>,
    source: Rc<str>,
) {
    asked.borrow_mut().out = Some(Rc::clone(&source));
    let answer = {
        let (elsewhere, source) = (elsewhere.clone(), Rc::clone(&source));
        Callback::from(move |events: Vec<MdEvent>| {
            received.set(Some((Rc::clone(&source), Rc::new(events))));
            let next = {
                let mut asked = asked.borrow_mut();
                asked.out = None;
                asked.next.take()
            };
            if let Some(next) = next.filter(|next| *next != source) {
                ask(elsewhere.clone(), asked.clone(), received.clone(), next);
            }
        })
    };
    elsewhere.emit((source, answer));
}

/// Markdown as a component, parsed as the [`MarkdownParser`] context says (plain text without
/// one). Re-renders only when the source (or the parser) changes.
#[function_component(Markdown)]
pub fn markdown(props: &MarkdownProps) -> Html {
    let parser = use_context::<MarkdownParser>();
    let received = use_state(|| None::<(Rc<str>, Rc<Vec<MdEvent>>)>);
    let asked = use_mut_ref(Asked::default);
    {
        let received = received.clone();
        use_effect_with(
            (Rc::clone(&props.source), parser.clone()),
            move |(source, parser)| {
                let Some(MarkdownParser::Elsewhere(elsewhere)) = parser else {
                    return;
                };
                if received.as_ref().is_some_and(|(of, _)| of == source) {
                    return;
                }
                if asked.borrow().out.is_some() {
                    asked.borrow_mut().next = Some(Rc::clone(source));
                    return;
                }
                ask(
                    elsewhere.clone(),
                    asked,
                    received.setter(),
                    Rc::clone(source),
                );
            },
        );
    }
    let body = match &parser {
        Some(MarkdownParser::Here(parse)) => render_events(&parse(&props.source)),
        Some(MarkdownParser::Elsewhere(_)) => match &*received {
            Some((_, events)) => render_events(events),
            None => html! { { props.source.to_string() } },
        },
        None => html! { { props.source.to_string() } },
    };
    html! { <div class="gg-md">{ body }</div> }
}

#[cfg(test)]
mod tests {
    use super::{MdEvent, MdTag, render, render_events};

    #[test]
    fn links_show_where_they_go() {
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
}
