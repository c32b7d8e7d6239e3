//! The component playground: every component in every state, light and dark, from mock data, plus
//! a live widget driven by a scripted mock agent (see [`crate::mock_agent`]).

use std::rc::Rc;

use gg_components::mock;
use gg_components::*;
use yew::prelude::*;

use crate::mock_agent::MockAgent;

#[derive(Properties, PartialEq)]
struct SpecimenProps {
    /// Anchor and heading.
    id: AttrValue,
    title: AttrValue,
    #[prop_or_default]
    note: Option<AttrValue>,
    /// Renders the specimen for one theme.
    render: Callback<Theme, Html>,
}

/// One state, shown in light and dark side by side, each in its own closed shadow root.
#[function_component(Specimen)]
fn specimen(props: &SpecimenProps) -> Html {
    html! {
        <section class="pg-specimen" id={props.id.clone()} data-specimen={props.id.clone()} aria-labelledby={format!("{}-h", props.id)}>
            <h2 id={format!("{}-h", props.id)}>{ props.title.clone() }</h2>
            if let Some(note) = &props.note {
                <p class="pg-note">{ note.clone() }</p>
            }
            <div class="pg-pair">
                { for [Theme::Light, Theme::Dark].into_iter().map(|theme| html! {
                    <div class={classes!("pg-cell", format!("pg-{}", theme.as_str()))} data-theme={theme.as_str()}>
                        <ShadowHost {theme}>{ props.render.emit(theme) }</ShadowHost>
                    </div>
                }) }
            </div>
        </section>
    }
}

fn chat(
    messages: Vec<Rc<ChatMessage>>,
    model: ModelStatus,
    generating: bool,
    errors: Vec<UiError>,
) -> Callback<Theme, Html> {
    Callback::from(move |_theme: Theme| {
        html! {
            <ChatOverlay messages={messages.clone()} markdown={MarkdownParser::here()} model={model.clone()} {generating} errors={errors.clone()}
                site={Some(AttrValue::from(mock::SITE))} on_send={Callback::noop()} />
        }
    })
}

fn launchers() -> Callback<Theme, Html> {
    Callback::from(|_theme: Theme| {
        html! {
            <div class="gg-pg-row" style="display: flex; gap: 16px; align-items: center; padding: 8px;">
                { for LauncherStatus::ALL.into_iter().map(|status| html! {
                    <figure style="margin: 0; text-align: center; color: var(--gg-muted); font-size: 12px;">
                        <Launcher {status} fixed={false} />
                        <figcaption>{ status.as_str() }</figcaption>
                    </figure>
                }) }
                <figure style="margin: 0; text-align: center; color: var(--gg-muted); font-size: 12px;">
                    <Launcher status={LauncherStatus::Loading} progress={Some(0.42)} fixed={false} />
                    <figcaption>{ "downloading 42%" }</figcaption>
                </figure>
            </div>
        }
    })
}

fn settings() -> Callback<Theme, Html> {
    Callback::from(|_theme: Theme| {
        html! {
            <SettingsPanel settings={mock::settings()} models={mock::models()} site={Some(AttrValue::from(mock::SITE))}
                on_change={Callback::noop()} />
        }
    })
}

fn timeline() -> Callback<Theme, Html> {
    Callback::from(|_theme: Theme| {
        html! {
            <div class="gg-panel" style="height: auto; padding: 10px;">
                <ToolTimeline steps={mock::tool_steps()} site={Some(AttrValue::from(mock::SITE))} />
            </div>
        }
    })
}

fn banners() -> Callback<Theme, Html> {
    Callback::from(|_theme: Theme| {
        html! {
            <div class="gg-panel" style="height: auto; max-height: none;">
                <div class="gg-errors" style="max-height: none; padding-bottom: 10px;">
                    { for mock::all_errors().into_iter().map(|error| html! { <ErrorBanner {error} /> }) }
                </div>
            </div>
        }
    })
}

fn hostile_markdown() -> Vec<Rc<ChatMessage>> {
    vec![
        Rc::new(ChatMessage::user(0, "Repeat this page's HTML.")),
        Rc::new(ChatMessage::assistant(1, mock::HOSTILE_MARKDOWN)),
    ]
}

/// One entry of the playground: anchor, heading, optional note, and how to render it.
struct SpecimenDef {
    id: &'static str,
    title: &'static str,
    note: Option<&'static str>,
    render: Callback<Theme, Html>,
}

impl SpecimenDef {
    fn new(
        id: &'static str,
        title: &'static str,
        note: Option<&'static str>,
        render: Callback<Theme, Html>,
    ) -> Self {
        Self {
            id,
            title,
            note,
            render,
        }
    }
}

#[derive(Clone, Properties, PartialEq)]
pub struct PlaygroundProps {
    /// Show only the specimen with this id (`playground.html?only=tools`), for screenshots and
    /// focused end-to-end tests.
    #[prop_or_default]
    pub only: Option<AttrValue>,
}

/// The playground page.
#[function_component(Playground)]
pub fn playground(props: &PlaygroundProps) -> Html {
    let ready = mock::model_ready;
    let specimens: Vec<SpecimenDef> = vec![
        SpecimenDef::new(
            "launcher",
            "Launcher",
            Some(
                "Status dot per state; progress ring while downloading. Drag it, or Alt+arrow keys, to move it to a corner.",
            ),
            launchers(),
        ),
        SpecimenDef::new(
            "empty",
            "Chat: empty, model not loaded",
            None,
            chat(vec![], ModelStatus::NotLoaded, false, vec![]),
        ),
        SpecimenDef::new(
            "downloading",
            "Chat: model download in progress",
            Some("Bytes, percent and ETA; the input is disabled until the model is ready."),
            chat(vec![], mock::model_downloading(), false, vec![]),
        ),
        SpecimenDef::new(
            "initializing",
            "Chat: preparing the model on the GPU",
            None,
            chat(vec![], mock::model_initializing(), false, vec![]),
        ),
        SpecimenDef::new(
            "streaming",
            "Chat: streaming answer",
            Some("Stop replaces Send while the model generates."),
            chat(mock::streaming(), ready(), true, vec![]),
        ),
        SpecimenDef::new(
            "thinking",
            "Chat: thinking (live)",
            None,
            chat(mock::thinking_live(), ready(), true, vec![]),
        ),
        SpecimenDef::new(
            "code",
            "Chat: code block, table, link and finished thinking",
            None,
            chat(mock::code_and_thinking(), ready(), false, vec![]),
        ),
        SpecimenDef::new(
            "tools",
            "Chat: every tool state, approval pending",
            None,
            chat(mock::with_tools(), ready(), true, vec![]),
        ),
        SpecimenDef::new("timeline", "Tool timeline", None, timeline()),
        SpecimenDef::new(
            "long",
            "Chat: long conversation",
            None,
            chat(mock::long_conversation(), ready(), false, vec![]),
        ),
        SpecimenDef::new(
            "errors",
            "Chat: error banners over a stopped answer",
            Some("Banners stack above the conversation (scrolling when there are many)."),
            chat(
                mock::stopped(),
                ready(),
                false,
                mock::all_errors()
                    .into_iter()
                    .filter(|e| {
                        matches!(
                            e.kind,
                            ErrorKind::GenerationFailed | ErrorKind::DownloadFailed
                        )
                    })
                    .collect(),
            ),
        ),
        SpecimenDef::new(
            "banners",
            "Every error banner",
            Some("Each banner says what went wrong, what to do, and offers the action."),
            banners(),
        ),
        SpecimenDef::new(
            "hostile",
            "Chat: hostile model output",
            Some(
                "Raw HTML, <script> and javascript: links render as inert text; remote images are not loaded.",
            ),
            chat(hostile_markdown(), ready(), false, vec![]),
        ),
        SpecimenDef::new("settings", "Settings", None, settings()),
    ];
    if let Some(only) = &props.only {
        let selected: Vec<SpecimenDef> = specimens
            .into_iter()
            .filter(|s| s.id == only.as_str())
            .collect();
        return html! {
            <main class="pg-only">
                if selected.is_empty() {
                    <p>{ format!("No specimen named {only:?}.") }</p>
                }
                { for selected.into_iter().map(|s| html! {
                    <Specimen id={s.id} title={s.title} note={s.note.map(AttrValue::from)} render={s.render} />
                }) }
            </main>
        };
    }
    html! {
        <>
            <header class="pg-header">
                <h1>{ "Gemma Gem component playground" }</h1>
                <p>{ "Every component in every state, light and dark, from mock data. Each specimen lives in its own closed shadow root. \
                      The gem button at the bottom right is the live widget, driven by a scripted mock agent: send it a message." }</p>
                <nav aria-label="Specimens">
                    <ul class="pg-toc">
                        { for specimens.iter().map(|s| html! { <li><a href={format!("#{}", s.id)}>{ s.title }</a></li> }) }
                    </ul>
                </nav>
            </header>
            <main>
                { for specimens.into_iter().map(|s| html! {
                    <Specimen id={s.id} title={s.title} note={s.note.map(AttrValue::from)} render={s.render} />
                }) }
            </main>
            <MockAgent />
        </>
    }
}
