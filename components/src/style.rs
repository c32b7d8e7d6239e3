//! The component kit's styles. They are stylist global styles registered with the nearest
//! [`StyleManager`](stylist::manager::StyleManager), so under a [`crate::ShadowHost`] every rule lives
//! inside the closed shadow root and nothing leaks in or out. Class names are stable (`gg-*`), which
//! keeps SSR snapshots readable.
//!
//! Colours are CSS custom properties on `.gg-root`; `data-theme` forces light or dark, `auto` follows
//! `prefers-color-scheme`. `prefers-reduced-motion` turns animations and transitions off.

use stylist::yew::Global;
use stylist::{StyleSource, css};
use yew::prelude::*;

use crate::types::Theme;

fn base() -> StyleSource {
    css!(
        r#"
        :host { all: initial; }
        .gg-root {
            --gg-bg: #ffffff; --gg-surface: #f5f6fa; --gg-surface-2: #eaecf3; --gg-fg: #1b1d26;
            --gg-muted: #5b6072; --gg-border: #d6d9e3; --gg-accent: #5044e4; --gg-accent-fg: #ffffff;
            --gg-user-bg: #5044e4; --gg-user-fg: #ffffff; --gg-danger: #b3261e; --gg-danger-bg: #fdeceb;
            --gg-warn: #8a5a00; --gg-warn-bg: #fff4dc; --gg-ok: #1b7f47; --gg-focus: #1f5fff;
            --gg-code-bg: #eef0f6; --gg-shadow: 0 12px 40px rgba(18, 20, 40, 0.22);
            color-scheme: light;
            font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
            color: var(--gg-fg);
            text-align: left;
            letter-spacing: normal;
            -webkit-font-smoothing: antialiased;
        }
        .gg-root[data-theme="dark"] {
            --gg-bg: #16171d; --gg-surface: #1f2029; --gg-surface-2: #2a2c37; --gg-fg: #eceef5;
            --gg-muted: #a3a8ba; --gg-border: #363948; --gg-accent: #9a90ff; --gg-accent-fg: #10101a;
            --gg-user-bg: #4b40cf; --gg-user-fg: #ffffff; --gg-danger: #ff8a80; --gg-danger-bg: #3b1e21;
            --gg-warn: #ffcc66; --gg-warn-bg: #3a3120; --gg-ok: #5fd39a; --gg-focus: #8fb1ff;
            --gg-code-bg: #101117; --gg-shadow: 0 12px 40px rgba(0, 0, 0, 0.55);
            color-scheme: dark;
        }
        @media (prefers-color-scheme: dark) {
            .gg-root[data-theme="auto"] {
                --gg-bg: #16171d; --gg-surface: #1f2029; --gg-surface-2: #2a2c37; --gg-fg: #eceef5;
                --gg-muted: #a3a8ba; --gg-border: #363948; --gg-accent: #9a90ff; --gg-accent-fg: #10101a;
                --gg-user-bg: #4b40cf; --gg-user-fg: #ffffff; --gg-danger: #ff8a80; --gg-danger-bg: #3b1e21;
                --gg-warn: #ffcc66; --gg-warn-bg: #3a3120; --gg-ok: #5fd39a; --gg-focus: #8fb1ff;
                --gg-code-bg: #101117; --gg-shadow: 0 12px 40px rgba(0, 0, 0, 0.55);
                color-scheme: dark;
            }
        }
        .gg-root *, .gg-root *::before, .gg-root *::after { box-sizing: border-box; }
        .gg-root :focus { outline: none; }
        .gg-root :focus-visible { outline: 2px solid var(--gg-focus); outline-offset: 2px; }
        :where(.gg-root) :where(button, input, textarea, select) { font: inherit; color: inherit; }
        :where(.gg-root) :where(p) { margin: 0 0 8px; }
        :where(.gg-root) :where(p:last-child) { margin-bottom: 0; }
        .gg-btn {
            display: inline-flex; align-items: center; justify-content: center; gap: 6px;
            min-height: 32px; padding: 5px 12px; border-radius: 8px; cursor: pointer;
            border: 1px solid var(--gg-border); background: var(--gg-surface); color: var(--gg-fg);
            font-weight: 500; white-space: nowrap;
            transition: background-color 120ms ease, border-color 120ms ease;
        }
        .gg-btn:hover { background: var(--gg-surface-2); }
        .gg-btn:disabled { opacity: 0.5; cursor: not-allowed; }
        .gg-btn-primary { background: var(--gg-accent); border-color: var(--gg-accent); color: var(--gg-accent-fg); }
        .gg-btn-primary:hover { background: var(--gg-accent); filter: brightness(1.08); }
        .gg-btn-danger { background: var(--gg-danger); border-color: var(--gg-danger); color: var(--gg-bg); }
        .gg-btn-danger:hover { background: var(--gg-danger); filter: brightness(1.08); }
        .gg-btn-ghost { background: transparent; border-color: transparent; }
        .gg-btn-small { min-height: 26px; padding: 2px 8px; font-size: 12px; border-radius: 6px; }
        .gg-icon-btn { width: 32px; padding: 0; font-size: 16px; }
        .gg-visually-hidden {
            position: absolute; width: 1px; height: 1px; margin: -1px; padding: 0; border: 0;
            overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap;
        }
        .gg-muted { color: var(--gg-muted); }
        @keyframes gg-pulse { 0% { opacity: 1; } 50% { opacity: 0.35; } 100% { opacity: 1; } }
        @keyframes gg-spin { from { transform: rotate(0deg); } to { transform: rotate(360deg); } }
        @keyframes gg-blink { 0% { opacity: 1; } 50% { opacity: 0; } 100% { opacity: 1; } }
        @media (prefers-reduced-motion: reduce) {
            .gg-root *, .gg-root *::before, .gg-root *::after {
                animation: none !important; transition: none !important; scroll-behavior: auto !important;
            }
        }
        "#
    )
}

fn launcher() -> StyleSource {
    css!(
        r#"
        .gg-launcher-wrap { position: relative; display: inline-block; width: 56px; height: 56px; pointer-events: auto; }
        .gg-launcher-wrap[data-fixed="true"] { position: fixed; }
        .gg-launcher-wrap[data-fixed="true"][data-corner="bottom_right"] { right: 20px; bottom: 20px; }
        .gg-launcher-wrap[data-fixed="true"][data-corner="bottom_left"] { left: 20px; bottom: 20px; }
        .gg-launcher-wrap[data-fixed="true"][data-corner="top_right"] { right: 20px; top: 20px; }
        .gg-launcher-wrap[data-fixed="true"][data-corner="top_left"] { left: 20px; top: 20px; }
        .gg-launcher {
            position: absolute; inset: 4px; width: 48px; height: 48px; padding: 0; border: none;
            border-radius: 50%; cursor: grab; touch-action: none; user-select: none;
            background: linear-gradient(135deg, #6d5dfc, #3ab0ff); color: #ffffff;
            box-shadow: 0 4px 14px rgba(0, 0, 0, 0.28); font: 600 22px/48px system-ui, sans-serif;
            transition: transform 120ms ease;
        }
        .gg-launcher:hover { transform: scale(1.05); }
        .gg-launcher[data-dragging="true"] { cursor: grabbing; transition: none; }
        .gg-launcher-ring { position: absolute; inset: 0; width: 56px; height: 56px; pointer-events: none; transform: rotate(-90deg); }
        .gg-launcher-ring-track { fill: none; stroke: rgba(127, 127, 127, 0.25); stroke-width: 4; }
        .gg-launcher-ring-value { fill: none; stroke: var(--gg-accent); stroke-width: 4; stroke-linecap: round; transition: stroke-dashoffset 200ms linear; }
        .gg-launcher-dot {
            position: absolute; right: 3px; bottom: 3px; width: 14px; height: 14px; border-radius: 50%;
            border: 2px solid var(--gg-bg); background: var(--gg-muted); pointer-events: none;
        }
        .gg-launcher-dot[data-status="idle"] { background: var(--gg-ok); }
        .gg-launcher-dot[data-status="loading"] { background: #f0a000; animation: gg-pulse 1.2s ease-in-out infinite; }
        .gg-launcher-dot[data-status="thinking"] { background: #3ab0ff; animation: gg-pulse 0.9s ease-in-out infinite; }
        .gg-launcher-dot[data-status="acting"] { background: #a64dff; animation: gg-pulse 0.6s ease-in-out infinite; }
        .gg-launcher-dot[data-status="error"] { background: var(--gg-danger); }
        "#
    )
}

fn panel() -> StyleSource {
    css!(
        r#"
        .gg-panel {
            display: flex; flex-direction: column; width: 400px; max-width: calc(100vw - 24px);
            height: 600px; max-height: calc(100vh - 110px); overflow: hidden; pointer-events: auto;
            background: var(--gg-bg); color: var(--gg-fg); border: 1px solid var(--gg-border);
            border-radius: 16px; box-shadow: var(--gg-shadow);
        }
        .gg-panel[data-fill="true"] { width: 100%; height: 100%; max-width: none; max-height: none; border-radius: 0; border: none; box-shadow: none; }
        .gg-header { display: flex; align-items: center; gap: 4px; padding: 8px 8px 8px 14px; border-bottom: 1px solid var(--gg-border); }
        .gg-title { flex: 1; margin: 0; font-size: 15px; font-weight: 650; }
        .gg-title-gem { color: var(--gg-accent); margin-right: 6px; }
        .gg-model-status { padding: 6px 14px; font-size: 12px; color: var(--gg-muted); border-bottom: 1px solid var(--gg-border); background: var(--gg-surface); }
        .gg-model-status[data-status="ready"] { background: transparent; }
        .gg-model-line { display: flex; flex-wrap: wrap; justify-content: space-between; gap: 0 8px; }
        .gg-model-numbers { margin-left: auto; white-space: nowrap; font-variant-numeric: tabular-nums; }
        .gg-progress { height: 6px; margin-top: 5px; border-radius: 3px; background: var(--gg-surface-2); overflow: hidden; }
        .gg-progress-value { height: 100%; background: var(--gg-accent); border-radius: 3px; transition: width 200ms linear; }
        .gg-progress-indeterminate .gg-progress-value { width: 35%; animation: gg-pulse 1.2s ease-in-out infinite; }
        .gg-errors { display: flex; flex-direction: column; gap: 6px; padding: 8px 10px 0; flex-shrink: 0; max-height: 45%; overflow-y: auto; }
        .gg-error { padding: 10px 12px; border-radius: 10px; background: var(--gg-danger-bg); border: 1px solid var(--gg-danger); font-size: 13px; }
        .gg-error[data-kind="site_disabled"], .gg-error[data-kind="context_invalidated"] { background: var(--gg-warn-bg); border-color: var(--gg-warn); }
        .gg-error-title { display: block; margin-bottom: 2px; font-weight: 650; }
        .gg-error-detail { font: 11px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; color: var(--gg-muted); overflow-wrap: anywhere; }
        .gg-error-actions { display: flex; flex-wrap: wrap; gap: 6px; margin-top: 8px; }
        .gg-log {
            flex: 1; min-height: 0; overflow-y: auto; overscroll-behavior: contain; scrollbar-gutter: stable;
            padding: 12px 10px 12px 14px; display: flex; flex-direction: column; gap: 12px;
        }
        .gg-empty { margin: auto; max-width: 280px; text-align: center; color: var(--gg-muted); }
        .gg-empty-gem { display: block; font-size: 32px; color: var(--gg-accent); }
        .gg-msg { max-width: 100%; overflow-wrap: anywhere; contain: layout style; }
        .gg-msg[data-role="user"] {
            align-self: flex-end; max-width: 85%; padding: 8px 12px; border-radius: 14px 14px 4px 14px;
            background: var(--gg-user-bg); color: var(--gg-user-fg); white-space: pre-wrap;
        }
        .gg-msg[data-role="assistant"] { align-self: stretch; }
        .gg-msg-note { font-size: 12px; color: var(--gg-muted); font-style: italic; }
        .gg-cursor { display: inline-block; width: 7px; height: 1em; margin-left: 2px; vertical-align: text-bottom; background: var(--gg-accent); animation: gg-blink 1s step-end infinite; }
        .gg-thinking { margin-bottom: 8px; border-left: 3px solid var(--gg-border); padding-left: 10px; color: var(--gg-muted); font-size: 13px; }
        .gg-thinking summary { cursor: pointer; font-weight: 600; }
        .gg-thinking[data-active="true"] summary { animation: gg-pulse 1.4s ease-in-out infinite; }
        .gg-thinking-body { margin-top: 4px; white-space: pre-wrap; }
        .gg-composer { display: flex; flex-direction: column; gap: 6px; padding: 10px; border-top: 1px solid var(--gg-border); }
        .gg-composer-row { display: flex; align-items: flex-end; gap: 8px; }
        .gg-attachments { display: flex; flex-wrap: wrap; gap: 6px; align-items: flex-start; }
        .gg-attachment { position: relative; margin: 0; width: 56px; height: 56px; border: 1px solid var(--gg-border); border-radius: 8px; overflow: hidden; background: var(--gg-surface); }
        .gg-attachment img { width: 100%; height: 100%; object-fit: cover; display: block; }
        .gg-attachment-remove { position: absolute; top: 0; right: 0; min-width: 20px; height: 20px; padding: 0; line-height: 18px; border-radius: 0 0 0 6px; background: var(--gg-surface); }
        .gg-attach-error { flex-basis: 100%; margin: 0; font-size: 12px; color: var(--gg-danger); }
        .gg-msg-images { display: flex; flex-wrap: wrap; gap: 6px; margin-bottom: 4px; }
        .gg-msg-images img { max-width: 160px; max-height: 120px; border-radius: 8px; display: block; }
        .gg-composer-label { flex: 1; display: block; }
        .gg-input {
            display: block; width: 100%; min-height: 38px; max-height: 160px; resize: none; padding: 8px 10px;
            border: 1px solid var(--gg-border); border-radius: 10px; background: var(--gg-surface); color: var(--gg-fg);
            field-sizing: content;
        }
        .gg-input:disabled { opacity: 0.6; cursor: not-allowed; }
        .gg-input::placeholder { color: var(--gg-muted); }
        "#
    )
}

fn markdown() -> StyleSource {
    css!(
        r#"
        .gg-md h1, .gg-md h2, .gg-md h3, .gg-md h4, .gg-md h5, .gg-md h6 { margin: 10px 0 6px; font-size: 15px; line-height: 1.3; }
        .gg-md h1 { font-size: 17px; }
        .gg-md h2 { font-size: 16px; }
        .gg-md ul, .gg-md ol { margin: 0 0 8px; padding-left: 22px; }
        .gg-md li { margin: 2px 0; }
        .gg-md blockquote { margin: 0 0 8px; padding-left: 10px; border-left: 3px solid var(--gg-border); color: var(--gg-muted); }
        .gg-md a { color: var(--gg-accent); text-decoration: underline; }
        .gg-md-blocked { text-decoration: underline dotted; color: var(--gg-muted); cursor: not-allowed; }
        .gg-md-dest { color: var(--gg-muted); font-size: 0.85em; overflow-wrap: anywhere; }
        .gg-md code { font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: var(--gg-code-bg); padding: 1px 4px; border-radius: 4px; }
        .gg-md-raw { white-space: pre-wrap; font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; color: var(--gg-muted); }
        .gg-md table { border-collapse: collapse; margin: 0 0 8px; font-size: 13px; display: block; overflow-x: auto; }
        .gg-md th, .gg-md td { border: 1px solid var(--gg-border); padding: 3px 8px; }
        .gg-md hr { border: none; border-top: 1px solid var(--gg-border); margin: 10px 0; }
        .gg-code { margin: 0 0 8px; border: 1px solid var(--gg-border); border-radius: 10px; overflow: hidden; background: var(--gg-code-bg); }
        .gg-code-bar { display: flex; align-items: center; justify-content: space-between; padding: 3px 6px 3px 10px; font-size: 11px; color: var(--gg-muted); border-bottom: 1px solid var(--gg-border); }
        .gg-code pre { margin: 0; padding: 10px; overflow-x: auto; }
        .gg-code pre code { padding: 0; background: transparent; white-space: pre; }
        "#
    )
}

fn tools() -> StyleSource {
    css!(
        r#"
        .gg-tools:empty { display: none; }
        .gg-tools { list-style: none; margin: 0 0 8px; padding: 0; display: flex; flex-direction: column; gap: 6px; }
        .gg-tool { padding: 8px 10px; border: 1px solid var(--gg-border); border-radius: 10px; background: var(--gg-surface); font-size: 13px; }
        .gg-tool[data-state="awaiting_approval"] { border-color: var(--gg-warn); background: var(--gg-warn-bg); }
        .gg-tool[data-state="failed"] { border-color: var(--gg-danger); }
        .gg-tool-head { display: flex; align-items: center; gap: 8px; }
        .gg-tool-icon { width: 16px; text-align: center; }
        .gg-tool[data-state="running"] .gg-tool-icon { animation: gg-spin 1s linear infinite; }
        .gg-tool-name { font: 600 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
        .gg-tool-state { flex: 1; color: var(--gg-muted); font-size: 12px; }
        .gg-tool-duration { color: var(--gg-muted); font-size: 12px; font-variant-numeric: tabular-nums; }
        .gg-tool-args { display: block; margin-top: 4px; font: 11.5px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; color: var(--gg-muted); overflow-wrap: anywhere; }
        .gg-tool-result { margin-top: 6px; }
        .gg-tool-result summary { cursor: pointer; font-size: 12px; color: var(--gg-muted); }
        .gg-tool-result pre { margin: 4px 0 0; max-height: 160px; overflow: auto; padding: 6px 8px; border-radius: 6px; background: var(--gg-code-bg); font: 11.5px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre-wrap; }
        .gg-tool-error { margin-top: 4px; color: var(--gg-danger); font-size: 12px; }
        .gg-tool-shot { display: block; margin-top: 6px; max-width: 100%; max-height: 140px; border-radius: 6px; border: 1px solid var(--gg-border); }
        .gg-approval { margin-top: 8px; }
        .gg-approval-reason { font-size: 12.5px; margin-bottom: 6px; }
        .gg-approval-code { margin: 0 0 6px; max-height: 240px; overflow: auto; padding: 6px 8px; border-radius: 6px; background: var(--gg-code-bg); font: 11.5px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre-wrap; word-break: break-all; }
        .gg-approval-actions { display: flex; flex-wrap: wrap; gap: 6px; }
        .gg-approval-hint { margin-top: 6px; font-size: 12px; color: var(--gg-danger); }
        "#
    )
}

fn settings() -> StyleSource {
    css!(
        r#"
        .gg-settings { display: flex; flex-direction: column; min-height: 0; flex: 1; overflow-y: auto; padding: 4px 14px 14px; }
        .gg-settings-section { padding: 10px 0; border-bottom: 1px solid var(--gg-border); }
        .gg-settings-section:last-child { border-bottom: none; }
        .gg-settings-section h3 { margin: 0 0 8px; font-size: 13px; font-weight: 650; }
        .gg-field { display: flex; align-items: center; justify-content: space-between; gap: 10px; margin: 6px 0; }
        .gg-field-stack { display: flex; flex-direction: column; gap: 4px; margin: 6px 0; }
        .gg-field-hint { display: block; font-size: 12px; color: var(--gg-muted); }
        .gg-select, .gg-text, .gg-number {
            min-height: 32px; padding: 4px 8px; border: 1px solid var(--gg-border); border-radius: 8px;
            background: var(--gg-surface); color: var(--gg-fg);
        }
        .gg-number { width: 80px; }
        .gg-text { width: 100%; }
        .gg-text[aria-invalid="true"] { border-color: var(--gg-danger); }
        .gg-range { width: 160px; accent-color: var(--gg-accent); }
        .gg-check { width: 18px; height: 18px; accent-color: var(--gg-accent); }
        .gg-list { list-style: none; margin: 0; padding: 0; display: flex; flex-direction: column; gap: 4px; }
        .gg-list-item { display: flex; align-items: center; justify-content: space-between; gap: 8px; padding: 4px 0; font-size: 13px; }
        .gg-list-empty { font-size: 12px; color: var(--gg-muted); margin: 0 0 6px; }
        .gg-badge { display: inline-block; padding: 1px 6px; border-radius: 999px; font-size: 11px; background: var(--gg-surface-2); color: var(--gg-muted); }
        .gg-badge-ok { color: var(--gg-ok); }
        .gg-badge-deny { color: var(--gg-danger); }
        .gg-field-error { font-size: 12px; color: var(--gg-danger); }
        "#
    )
}

fn app() -> StyleSource {
    css!(
        r#"
        .gg-app-panel { position: fixed; z-index: 1; pointer-events: auto; }
        .gg-app-panel[data-corner="bottom_right"] { right: 20px; bottom: 84px; }
        .gg-app-panel[data-corner="bottom_left"] { left: 20px; bottom: 84px; }
        .gg-app-panel[data-corner="top_right"] { right: 20px; top: 84px; }
        .gg-app-panel[data-corner="top_left"] { left: 20px; top: 84px; }
        .gg-app-panel[data-fill="true"] { position: static; width: 100%; height: 100%; }
        "#
    )
}

/// Registers every style of the kit with the current style manager. Rendered by [`ThemeRoot`].
#[function_component(GgStyles)]
pub fn gg_styles() -> Html {
    html! {
        <>
            <Global css={base()} />
            <Global css={launcher()} />
            <Global css={panel()} />
            <Global css={markdown()} />
            <Global css={tools()} />
            <Global css={settings()} />
            <Global css={app()} />
        </>
    }
}

/// Properties of [`ThemeRoot`].
#[derive(Clone, Properties, PartialEq)]
pub struct ThemeRootProps {
    /// Light, dark, or follow the system.
    #[prop_or_default]
    pub theme: Theme,
    /// What the theme applies to.
    #[prop_or_default]
    pub children: Html,
}

/// The root every component of the kit needs above it: registers the styles and sets the theme.
/// [`crate::ShadowHost`] renders one itself; a page that hosts the UI without a shadow root (the
/// extension's overlay page) renders one at the top.
#[function_component(ThemeRoot)]
pub fn theme_root(props: &ThemeRootProps) -> Html {
    html! {
        <div class="gg-root" data-theme={props.theme.as_str()}>
            <GgStyles />
            { props.children.clone() }
        </div>
    }
}
