//! Native SSR snapshot tests of the markup (yew `LocalServerRenderer`).
//!
//! Snapshots live in `tests/snapshots/*.html`, one tag per line. After an intended markup change,
//! regenerate them with `GG_UPDATE_SNAPSHOTS=1 cargo test -p gg-components --test ssr_snapshots`
//! and review the diff. A missing snapshot fails the test (it is never silently created).
#![cfg(not(target_arch = "wasm32"))]

use std::path::PathBuf;
use std::rc::Rc;

use gg_components::mock;
use gg_components::*;
use yew::LocalServerRenderer;
use yew::html::BaseComponent;
use yew::{AttrValue, Callback};

fn render<C>(props: C::Properties) -> String
where
    C: BaseComponent,
{
    futures::executor::block_on(
        LocalServerRenderer::<C>::with_props(props)
            .hydratable(false)
            .render(),
    )
}

/// One tag per line, for readable diffs.
fn pretty(html: &str) -> String {
    let mut out = html.replace("><", ">\n<");
    out.push('\n');
    out
}

fn check_snapshot(name: &str, html: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{name}.html"));
    let actual = pretty(html);
    if std::env::var_os("GG_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &actual)
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "snapshot {} missing ({e}); create it with GG_UPDATE_SNAPSHOTS=1 and review it",
            path.display()
        )
    });
    if expected != actual {
        let first_diff = expected
            .lines()
            .zip(actual.lines())
            .enumerate()
            .find(|(_, (e, a))| e != a)
            .map(|(i, (e, a))| format!("line {}:\n  expected: {e}\n  actual:   {a}", i + 1))
            .unwrap_or_else(|| {
                format!(
                    "lengths differ: expected {} lines, got {}",
                    expected.lines().count(),
                    actual.lines().count()
                )
            });
        panic!(
            "snapshot {name} differs ({first_diff}); if intended, rerun with GG_UPDATE_SNAPSHOTS=1 and review the diff"
        );
    }
}

fn overlay(
    messages: Vec<Rc<ChatMessage>>,
    model: ModelStatus,
    generating: bool,
    errors: Vec<UiError>,
) -> ChatOverlayProps {
    yew::props!(ChatOverlayProps {
        messages,
        markdown: MarkdownParser::here(),
        model,
        generating,
        errors,
        site: Some(AttrValue::from(mock::SITE)),
        on_send: Callback::noop(),
    })
}

#[test]
fn launcher_states() {
    let mut html = String::new();
    for status in LauncherStatus::ALL {
        html.push_str(&render::<Launcher>(yew::props!(LauncherProps {
            status,
            fixed: false
        })));
    }
    html.push_str(&render::<Launcher>(yew::props!(LauncherProps {
        status: LauncherStatus::Loading,
        progress: Some(0.42),
        open: true,
        corner: Corner::TopLeft,
    })));
    assert_eq!(html.matches(r#"data-testid="gg-launcher""#).count(), 6);
    assert!(
        html.contains(r#"data-progress="42""#),
        "progress ring: {html}"
    );
    check_snapshot("launcher_states", &html);
}

#[test]
fn chat_empty() {
    let html = render::<ChatOverlay>(overlay(vec![], ModelStatus::NotLoaded, false, vec![]));
    for id in [
        "gg-panel",
        "gg-input",
        "gg-send",
        "gg-new-chat",
        "gg-settings-open",
        "gg-model-status",
    ] {
        assert!(
            html.contains(&format!(r#"data-testid="{id}""#)),
            "{id} missing"
        );
    }
    assert!(html.contains(r#"role="log""#));
    assert!(!html.contains("gg-stop"), "no Stop when idle");
    check_snapshot("chat_empty", &html);
}

#[test]
fn chat_streaming() {
    let html = render::<ChatOverlay>(overlay(
        mock::streaming(),
        mock::model_ready(),
        true,
        vec![],
    ));
    assert!(html.contains(r#"data-testid="gg-stop""#));
    assert!(
        !html.contains(r#"data-testid="gg-send""#),
        "Stop replaces Send while generating"
    );
    assert!(html.contains(r#"data-role="user""#) && html.contains(r#"data-role="assistant""#));
    assert!(html.contains(r#"aria-busy="true""#));
    assert!(html.contains("<strong>three laptops</strong>"));
    check_snapshot("chat_streaming", &html);
}

#[test]
fn chat_long_conversation() {
    let html = render::<ChatOverlay>(overlay(
        mock::long_conversation(),
        mock::model_ready(),
        false,
        vec![],
    ));
    assert_eq!(html.matches(r#"data-testid="gg-message""#).count(), 12);
    check_snapshot("chat_long_conversation", &html);
}

#[test]
fn chat_code_and_thinking() {
    let html = render::<ChatOverlay>(overlay(
        mock::code_and_thinking(),
        mock::model_ready(),
        false,
        vec![],
    ));
    assert!(html.contains(r#"data-testid="gg-thinking""#));
    assert!(html.contains(r#"data-testid="gg-copy-code""#));
    assert!(html.contains(r#"class="language-js""#));
    assert!(html.contains("<th>Model</th>"));
    assert!(html.contains(r#"href="https://developer.mozilla.org/""#));
    check_snapshot("chat_code_and_thinking", &html);
}

#[test]
fn chat_thinking_live() {
    let html = render::<ChatOverlay>(overlay(
        mock::thinking_live(),
        mock::model_ready(),
        true,
        vec![],
    ));
    assert!(html.contains(r#"data-active="true""#));
    assert!(html.contains("Thinking…"));
    check_snapshot("chat_thinking_live", &html);
}

#[test]
fn chat_tools_every_state() {
    let html = render::<ChatOverlay>(overlay(
        mock::with_tools(),
        mock::model_ready(),
        true,
        vec![],
    ));
    for state in ["pending", "awaiting_approval", "running", "done", "failed"] {
        assert!(
            html.contains(&format!(r#"data-state="{state}""#)),
            "{state} missing"
        );
    }
    for id in ["gg-approve-once", "gg-approve-always", "gg-deny"] {
        assert_eq!(
            html.matches(&format!(r#"data-testid="{id}""#)).count(),
            1,
            "{id}"
        );
    }
    assert!(html.contains(r#"data-tool="run_javascript""#));
    assert!(html.contains("Always on https://shop.example"));
    assert!(html.contains(r#"src="data:image/png;base64,"#));
    assert!(html.contains("412 ms"));
    check_snapshot("chat_tools", &html);
}

#[test]
fn chat_downloading_disables_input() {
    let html = render::<ChatOverlay>(overlay(vec![], mock::model_downloading(), false, vec![]));
    assert!(
        html.contains("512 MB of 1.5 GB · 33% · about 3 min left"),
        "{html}"
    );
    assert!(html.contains(r#"aria-valuenow="33""#));
    let input = html
        .split("<textarea")
        .nth(1)
        .and_then(|rest| rest.split('>').next())
        .unwrap_or_default();
    assert!(
        input.contains("disabled"),
        "input must be disabled while loading: {input}"
    );
    check_snapshot("chat_downloading", &html);
    let html = render::<ChatOverlay>(overlay(vec![], mock::model_initializing(), false, vec![]));
    check_snapshot("chat_initializing", &html);
}

#[test]
fn chat_every_error_banner() {
    let html = render::<ChatOverlay>(overlay(
        mock::stopped(),
        mock::model_ready(),
        false,
        mock::all_errors(),
    ));
    assert_eq!(
        html.matches(r#"data-testid="gg-error""#).count(),
        ErrorKind::ALL.len()
    );
    for kind in ErrorKind::ALL {
        assert!(html.contains(&format!(r#"data-kind="{}""#, kind.as_str())));
    }
    assert!(html.contains(r#"data-action="webgpu_help""#));
    assert!(html.contains(r#"data-action="reload_page""#));
    assert!(html.contains("Stopped."));
    check_snapshot("chat_errors", &html);
}

#[test]
fn tool_timeline_alone() {
    let html = render::<ToolTimeline>(yew::props!(ToolTimelineProps {
        steps: mock::tool_steps()
    }));
    assert_eq!(html.matches(r#"data-testid="gg-tool-step""#).count(), 6);
    assert!(html.contains("Always on this site"));
    check_snapshot("tool_timeline", &html);
}

#[test]
fn settings_panel() {
    let html = render::<SettingsPanel>(yew::props!(SettingsPanelProps {
        settings: mock::settings(),
        models: mock::models(),
        site: Some(AttrValue::from(mock::SITE)),
        on_change: Callback::noop(),
    }));
    assert!(html.contains(r#"data-testid="gg-settings""#));
    assert!(html.contains("Gemma 4 E2B — 1.5 GB, downloaded"));
    assert!(html.contains("Gemma 4 E4B — 3.1 GB download"));
    assert_eq!(html.matches(r#"data-testid="gg-site-remove""#).count(), 2);
    assert_eq!(
        html.matches(r#"data-testid="gg-permission-remove""#)
            .count(),
        2
    );
    assert_eq!(html.matches(r#"data-testid="gg-clear-model""#).count(), 2);
    assert!(html.contains(r#"data-testid="gg-disable-site""#));
    check_snapshot("settings", &html);

    // The current site already disabled: no "Disable on this site".
    let html = render::<SettingsPanel>(yew::props!(SettingsPanelProps {
        settings: Settings::default(),
        site: Some(AttrValue::from("https://bank.example")),
        on_change: Callback::noop(),
    }));
    assert!(html.contains(r#"data-testid="gg-disable-site""#));
    let mut disabled = Settings::default();
    disabled.disabled_sites.push("https://bank.example".into());
    let html = render::<SettingsPanel>(yew::props!(SettingsPanelProps {
        settings: disabled,
        site: Some(AttrValue::from("https://bank.example")),
        on_change: Callback::noop(),
    }));
    assert!(!html.contains(r#"data-testid="gg-disable-site""#));
    check_snapshot("settings_defaults_site_disabled", &html);
}

#[test]
fn gem_app_initial_markup() {
    let state = ChatState {
        messages: mock::streaming(),
        generating: true,
        model: mock::model_ready(),
        panel_open: true,
        site: Some(mock::SITE.into()),
        ..ChatState::default()
    };
    let html = render::<GemApp>(yew::props!(GemAppProps {
        initial: Some(Rc::new(state)),
        markdown: MarkdownParser::here(),
    }));
    assert!(html.contains(r#"data-testid="gg-launcher""#));
    assert!(html.contains(r#"data-status="thinking""#));
    assert!(html.contains(r#"data-testid="gg-panel""#));
    assert!(html.contains(r#"data-testid="gg-close""#));
    check_snapshot("gem_app", &html);

    let html = render::<GemApp>(yew::props!(GemAppProps {
        launcher: false,
        markdown: MarkdownParser::here(),
    }));
    assert!(
        !html.contains(r#"data-testid="gg-launcher""#),
        "no launcher in the overlay page"
    );
    assert!(html.contains(r#"data-fill="true""#));
}

/// [`Markdown`] parsed here.
#[yew::function_component(HereMarkdown)]
fn here_markdown(props: &MarkdownProps) -> yew::Html {
    yew::html! {
        <yew::ContextProvider<MarkdownParser> context={MarkdownParser::here()}>
            <Markdown source={props.source.clone()} />
        </yew::ContextProvider<MarkdownParser>>
    }
}

/// Model output is untrusted: raw HTML, script tags and `javascript:` links must come out as text.
#[test]
fn hostile_markdown_renders_as_inert_text() {
    let html = render::<HereMarkdown>(yew::props!(MarkdownProps {
        source: Rc::<str>::from(mock::HOSTILE_MARKDOWN)
    }));
    // No element was created from the raw HTML: every real tag is one the renderer makes itself and
    // carries no event handler. (Text escapes `<`, so each `<` starts a real tag.)
    for tag in html.split('<').skip(1) {
        let inner = tag.split('>').next().unwrap_or_default();
        let name = inner
            .trim_start_matches('/')
            .split_whitespace()
            .next()
            .unwrap_or_default();
        assert!(
            ["div", "p", "span", "a"].contains(&name),
            "unexpected element <{inner}> in {html}"
        );
        for attr in inner.split_whitespace().skip(1) {
            assert!(
                !attr.to_ascii_lowercase().starts_with("on"),
                "event handler {attr} in <{inner}>"
            );
            assert!(
                !attr.to_ascii_lowercase().contains("javascript:"),
                "script URL {attr} in <{inner}>"
            );
        }
    }
    // ...it is shown as escaped text instead.
    assert!(html.contains("&lt;img src=x onerror="), "{html}");
    assert!(html.contains("&lt;script&gt;alert("), "{html}");
    assert!(html.contains("&lt;div onclick="), "{html}");
    // The javascript: links keep their text but lose the link.
    assert!(
        html.contains(r#"class="gg-md-blocked">click me</span>"#),
        "{html}"
    );
    assert!(
        html.contains(r#"class="gg-md-blocked">this</span>"#),
        "{html}"
    );
    // The remote image is not loaded; it becomes a link the user may open.
    assert!(html.contains(r#"href="https://tracker.example/p.png?leak=secret""#));
    assert!(html.contains("[image: pic]"));
    check_snapshot("markdown_hostile", &html);
}
