//! Settings: model, thinking, limits, sites, permissions, model source, downloaded models.
//!
//! Controlled: every change emits the whole new [`Settings`] through `on_change`; the host stores it
//! and passes it back.

use wasm_bindgen::JsCast;
use yew::prelude::*;

use crate::format;
use crate::types::{ModelChoice, ModelInfo, ModelSource, Settings};

#[derive(Clone, Properties, PartialEq)]
pub struct SettingsPanelProps {
    pub settings: Settings,
    /// Sizes and cache state of the models.
    #[prop_or_default]
    pub models: Vec<ModelInfo>,
    /// The site the UI is shown on (offers "Disable on this site").
    #[prop_or_default]
    pub site: Option<AttrValue>,
    /// Fill the parent instead of floating as a card.
    #[prop_or_default]
    pub fill: bool,
    pub on_change: Callback<Settings>,
    /// Delete a model's downloaded files.
    #[prop_or_default]
    pub on_clear_model: Callback<ModelChoice>,
    /// Back to the chat.
    #[prop_or_default]
    pub on_close: Callback<()>,
}

fn target_value(e: &Event) -> Option<String> {
    let target = e.target()?;
    if let Some(input) = target.dyn_ref::<web_sys::HtmlInputElement>() {
        return Some(input.value());
    }
    target
        .dyn_ref::<web_sys::HtmlSelectElement>()
        .map(|s| s.value())
}

fn target_checked(e: &Event) -> Option<bool> {
    e.target()?
        .dyn_ref::<web_sys::HtmlInputElement>()
        .map(|i| i.checked())
}

/// A mirror URL the UI accepts: `https://host/...`, or `http://` on localhost for testing.
pub fn is_valid_mirror(url: &str) -> bool {
    let url = url.trim();
    if url.is_empty() || url.contains(char::is_whitespace) || url.chars().any(char::is_control) {
        return false;
    }
    let lower = url.to_ascii_lowercase();
    let rest = if let Some(rest) = lower.strip_prefix("https://") {
        rest
    } else if let Some(rest) = lower.strip_prefix("http://") {
        let host = rest.split(['/', ':']).next().unwrap_or_default();
        if host != "localhost" && host != "127.0.0.1" {
            return false;
        }
        rest
    } else {
        return false;
    };
    !rest.is_empty() && !rest.starts_with('/')
}

/// A plain `http://` mirror on another machine: usable only once the user confirmed it (its
/// files travel unencrypted). `http://localhost` and `http://127.0.0.1` are [valid](is_valid_mirror)
/// as they are.
pub fn needs_http_confirmation(url: &str) -> bool {
    let url = url.trim();
    if url.is_empty() || url.contains(char::is_whitespace) || url.chars().any(char::is_control) {
        return false;
    }
    let lower = url.to_ascii_lowercase();
    let Some(rest) = lower.strip_prefix("http://") else {
        return false;
    };
    !rest.is_empty() && !rest.starts_with('/') && !is_valid_mirror(url)
}

/// The settings page of the panel.
#[function_component(SettingsPanel)]
pub fn settings_panel(props: &SettingsPanelProps) -> Html {
    let settings = &props.settings;
    // A mirror URL being edited, applied on change when valid.
    let mirror_draft = use_state(|| match &settings.model_source {
        ModelSource::Mirror(url) => url.clone(),
        ModelSource::HuggingFace => String::new(),
    });
    // "A mirror URL" chosen but no valid URL entered yet: nothing is emitted until there is one.
    let mirror_chosen = use_state(|| false);
    // The user ticked "use this plain http:// address anyway" for the draft.
    let http_confirmed = use_state(|| {
        matches!(&settings.model_source, ModelSource::Mirror(url)
            if settings.confirmed_http_mirror.as_deref() == Some(url.as_str()))
    });

    let change = |f: fn(&mut Settings, &Event) -> bool| {
        let on_change = props.on_change.clone();
        let settings = settings.clone();
        Callback::from(move |e: Event| {
            let mut next = settings.clone();
            if f(&mut next, &e) && next != settings {
                on_change.emit(next);
            }
        })
    };

    let on_model = change(|s, e| match target_value(e).as_deref() {
        Some("e2b") => {
            s.model = ModelChoice::E2b;
            true
        }
        Some("e4b") => {
            s.model = ModelChoice::E4b;
            true
        }
        _ => false,
    });
    let on_thinking = change(|s, e| {
        target_checked(e)
            .map(|checked| s.thinking = checked)
            .is_some()
    });
    let on_iterations = change(|s, e| {
        let (min, max) = Settings::MAX_ITERATIONS_RANGE;
        match target_value(e).and_then(|v| v.trim().parse::<u32>().ok()) {
            Some(n) => {
                s.max_iterations = n.clamp(min, max);
                true
            }
            None => false,
        }
    });
    let on_temperature = {
        let on_change = props.on_change.clone();
        let settings = settings.clone();
        Callback::from(move |e: InputEvent| {
            let (min, max) = Settings::TEMPERATURE_RANGE;
            let value = e
                .target()
                .and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok())
                .and_then(|i| i.value().parse::<f32>().ok());
            if let Some(t) = value {
                let mut next = settings.clone();
                next.temperature = t.clamp(min, max);
                if next != settings {
                    on_change.emit(next);
                }
            }
        })
    };
    let on_source = {
        let on_change = props.on_change.clone();
        let settings = settings.clone();
        let mirror_draft = mirror_draft.clone();
        let mirror_chosen = mirror_chosen.clone();
        let http_confirmed = http_confirmed.clone();
        Callback::from(move |e: Event| {
            let mut next = settings.clone();
            match target_value(&e).as_deref() {
                Some("hugging_face") => {
                    mirror_chosen.set(false);
                    next.model_source = ModelSource::HuggingFace;
                    next.confirmed_http_mirror = None;
                }
                Some("mirror") => {
                    mirror_chosen.set(true);
                    if !apply_mirror(&mut next, &mirror_draft, *http_confirmed) {
                        return;
                    }
                }
                _ => return,
            }
            if next != settings {
                on_change.emit(next);
            }
        })
    };
    let on_mirror_input = {
        let mirror_draft = mirror_draft.clone();
        let http_confirmed = http_confirmed.clone();
        Callback::from(move |e: InputEvent| {
            if let Some(input) = e
                .target()
                .and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok())
            {
                // A confirmation is for the address it was given for.
                if input.value().trim() != mirror_draft.trim() {
                    http_confirmed.set(false);
                }
                mirror_draft.set(input.value());
            }
        })
    };
    let on_mirror_change = {
        let on_change = props.on_change.clone();
        let settings = settings.clone();
        let http_confirmed = http_confirmed.clone();
        Callback::from(move |e: Event| {
            let Some(url) = target_value(&e) else { return };
            let mut next = settings.clone();
            if apply_mirror(&mut next, &url, *http_confirmed) && next != settings {
                on_change.emit(next);
            }
        })
    };
    let on_http_confirm = {
        let on_change = props.on_change.clone();
        let settings = settings.clone();
        let mirror_draft = mirror_draft.clone();
        let http_confirmed = http_confirmed.clone();
        Callback::from(move |e: Event| {
            let checked = target_checked(&e).unwrap_or(false);
            http_confirmed.set(checked);
            let mut next = settings.clone();
            if checked {
                if !apply_mirror(&mut next, &mirror_draft, true) {
                    return;
                }
            } else if next.confirmed_http_mirror.is_some() {
                // Withdrawn: the unconfirmed http:// mirror is not used any more.
                next.model_source = ModelSource::HuggingFace;
                next.confirmed_http_mirror = None;
            }
            if next != settings {
                on_change.emit(next);
            }
        })
    };
    let remove_site = |site: String| {
        let on_change = props.on_change.clone();
        let settings = settings.clone();
        Callback::from(move |_: MouseEvent| {
            let mut next = settings.clone();
            next.disabled_sites.retain(|s| *s != site);
            on_change.emit(next);
        })
    };
    let remove_permission = |index: usize| {
        let on_change = props.on_change.clone();
        let settings = settings.clone();
        Callback::from(move |_: MouseEvent| {
            let mut next = settings.clone();
            if index < next.site_permissions.len() {
                next.site_permissions.remove(index);
                on_change.emit(next);
            }
        })
    };
    let disable_this_site = props.site.as_ref().filter(|site| !settings.disabled_sites.iter().any(|s| s == site.as_str())).map(|site| {
        let on_change = props.on_change.clone();
        let settings = settings.clone();
        let site = site.to_string();
        let onclick = Callback::from(move |_: MouseEvent| {
            let mut next = settings.clone();
            next.disabled_sites.push(site.clone());
            on_change.emit(next);
        });
        html! {
            <button type="button" class="gg-btn gg-btn-small" data-testid="gg-disable-site" {onclick}>{ "Disable on this site" }</button>
        }
    });
    let on_close = props.on_close.reform(|_: MouseEvent| ());

    let mirror_selected = *mirror_chosen || matches!(settings.model_source, ModelSource::Mirror(_));
    let mirror_needs_confirmation = mirror_selected && needs_http_confirmation(&mirror_draft);
    let mirror_invalid =
        mirror_selected && !is_valid_mirror(&mirror_draft) && !mirror_needs_confirmation;
    let info = |model: ModelChoice| props.models.iter().find(|m| m.model == model);
    let model_option = |model: ModelChoice| {
        let detail = match info(model) {
            Some(i) if i.is_cached() => {
                format!(" — {}, downloaded", format::bytes(i.download_bytes))
            }
            Some(i) => format!(" — {} download", format::bytes(i.download_bytes)),
            None => String::new(),
        };
        html! {
            <option value={model.as_str()} selected={settings.model == model}>{ format!("{}{detail}", model.label()) }</option>
        }
    };
    let cached: Vec<&ModelInfo> = props
        .models
        .iter()
        .filter(|m| m.cached_bytes.is_some_and(|b| b > 0))
        .collect();

    html! {
        <section class="gg-panel" data-fill={props.fill.to_string()} aria-label="Gemma Gem settings">
            <header class="gg-header">
                <h2 class="gg-title">{ "Settings" }</h2>
                <button type="button" class="gg-btn gg-btn-ghost gg-btn-small" data-testid="gg-settings-close" onclick={on_close}>
                    { "Back to chat" }
                </button>
            </header>
            <div class="gg-settings" data-testid="gg-settings">
                <section class="gg-settings-section" aria-labelledby="gg-s-model">
                    <h3 id="gg-s-model">{ "Model" }</h3>
                    <label class="gg-field-stack">
                        <span>{ "Model" }</span>
                        <select class="gg-select" data-testid="gg-setting-model" onchange={on_model}>
                            { for ModelChoice::ALL.into_iter().map(model_option) }
                        </select>
                        <span class="gg-field-hint">{ "E2B is faster and smaller; E4B answers better and needs more GPU memory." }</span>
                    </label>
                    <label class="gg-field">
                        <span>
                            { "Thinking mode" }
                            <span class="gg-field-hint">{ "The model reasons before answering (slower, shows its thoughts)." }</span>
                        </span>
                        <input type="checkbox" class="gg-check" data-testid="gg-setting-thinking" checked={settings.thinking} onchange={on_thinking} />
                    </label>
                    <label class="gg-field">
                        <span>
                            { "Max steps per request" }
                            <span class="gg-field-hint">{ "Tool calls the agent may make before it must answer." }</span>
                        </span>
                        <input type="number" class="gg-number" data-testid="gg-setting-max-iterations"
                            min={Settings::MAX_ITERATIONS_RANGE.0.to_string()} max={Settings::MAX_ITERATIONS_RANGE.1.to_string()} step="1"
                            value={settings.max_iterations.to_string()} onchange={on_iterations} />
                    </label>
                    <label class="gg-field">
                        <span>{ "Temperature" }</span>
                        <span>
                            <input type="range" class="gg-range" data-testid="gg-setting-temperature"
                                min={Settings::TEMPERATURE_RANGE.0.to_string()} max={Settings::TEMPERATURE_RANGE.1.to_string()} step="0.1"
                                value={format!("{:.1}", settings.temperature)} oninput={on_temperature} />
                            <output class="gg-muted">{ format!(" {:.1}", settings.temperature) }</output>
                        </span>
                    </label>
                </section>

                <section class="gg-settings-section" aria-labelledby="gg-s-source">
                    <h3 id="gg-s-source">{ "Model source" }</h3>
                    <label class="gg-field-stack">
                        <span>{ "Download models from" }</span>
                        <select class="gg-select" data-testid="gg-setting-source" onchange={on_source}>
                            <option value="hugging_face" selected={!mirror_selected}>{ "Hugging Face" }</option>
                            <option value="mirror" selected={mirror_selected}>{ "A mirror URL" }</option>
                        </select>
                    </label>
                    if mirror_selected {
                        <label class="gg-field-stack">
                            <span>{ "Mirror URL (Hugging Face layout)" }</span>
                            <input type="url" class="gg-text" data-testid="gg-setting-mirror-url" placeholder="https://mirror.example/models"
                                value={(*mirror_draft).clone()} aria-invalid={mirror_invalid.to_string()}
                                oninput={on_mirror_input} onchange={on_mirror_change} />
                            if mirror_invalid {
                                <span class="gg-field-error" role="alert">{ "Enter an https:// address." }</span>
                            }
                        </label>
                        if mirror_needs_confirmation {
                            <label class="gg-field">
                                <span>
                                    { "Use this plain http:// address anyway" }
                                    <span class="gg-field-hint">{ "Its files travel unencrypted and could be changed on the way; files the mirror publishes a SHA-256 for are still checked." }</span>
                                </span>
                                <input type="checkbox" class="gg-check" data-testid="gg-setting-mirror-http-confirm"
                                    checked={*http_confirmed} onchange={on_http_confirm} />
                            </label>
                        }
                    }
                </section>

                <section class="gg-settings-section" aria-labelledby="gg-s-sites">
                    <h3 id="gg-s-sites">{ "Disabled sites" }</h3>
                    if settings.disabled_sites.is_empty() {
                        <p class="gg-list-empty">{ "Gemma Gem is on everywhere." }</p>
                    } else {
                        <ul class="gg-list">
                            { for settings.disabled_sites.iter().map(|site| html! {
                                <li class="gg-list-item" key={site.clone()}>
                                    <span>{ site.clone() }</span>
                                    <button type="button" class="gg-btn gg-btn-small" data-testid="gg-site-remove"
                                        aria-label={format!("Turn Gemma Gem back on for {site}")} onclick={remove_site(site.clone())}>{ "Remove" }</button>
                                </li>
                            }) }
                        </ul>
                    }
                    { for disable_this_site }
                </section>

                <section class="gg-settings-section" aria-labelledby="gg-s-perms">
                    <h3 id="gg-s-perms">{ "Site permissions" }</h3>
                    if settings.site_permissions.is_empty() {
                        <p class="gg-list-empty">{ "Sensitive actions ask you every time." }</p>
                    } else {
                        <ul class="gg-list">
                            { for settings.site_permissions.iter().enumerate().map(|(i, p)| html! {
                                <li class="gg-list-item" key={format!("{}|{}", p.site, p.tool)}>
                                    <span>
                                        <code>{ p.tool.clone() }</code>{ " on " }{ p.site.clone() }{ " " }
                                        if p.allowed {
                                            <span class="gg-badge gg-badge-ok">{ "allowed" }</span>
                                        } else {
                                            <span class="gg-badge gg-badge-deny">{ "denied" }</span>
                                        }
                                    </span>
                                    <button type="button" class="gg-btn gg-btn-small" data-testid="gg-permission-remove"
                                        aria-label={format!("Forget the {} permission for {}", p.tool, p.site)} onclick={remove_permission(i)}>{ "Forget" }</button>
                                </li>
                            }) }
                        </ul>
                    }
                </section>

                <section class="gg-settings-section" aria-labelledby="gg-s-storage">
                    <h3 id="gg-s-storage">{ "Downloaded models" }</h3>
                    if cached.is_empty() {
                        <p class="gg-list-empty">{ "No model files are stored." }</p>
                    } else {
                        <ul class="gg-list">
                            { for cached.iter().map(|m| {
                                let model = m.model;
                                let onclick = props.on_clear_model.reform(move |_: MouseEvent| model);
                                html! {
                                    <li class="gg-list-item" key={model.as_str()}>
                                        <span>{ model.label() }{ " " }<span class="gg-badge">{ format::bytes(m.cached_bytes.unwrap_or(0)) }</span></span>
                                        <button type="button" class="gg-btn gg-btn-small" data-testid="gg-clear-model" data-model={model.as_str()}
                                            aria-label={format!("Delete the downloaded files of {}", model.label())} {onclick}>{ "Clear" }</button>
                                    </li>
                                }
                            }) }
                        </ul>
                    }
                </section>
            </div>
        </section>
    }
}

/// Sets `next`'s source to the mirror `url` when it may be used: a [valid](is_valid_mirror)
/// address, or a plain `http://` one the user `confirmed`. `false` (nothing changed) otherwise.
fn apply_mirror(next: &mut Settings, url: &str, confirmed: bool) -> bool {
    let url = url.trim();
    if is_valid_mirror(url) {
        next.model_source = ModelSource::Mirror(url.to_owned());
        next.confirmed_http_mirror = None;
        true
    } else if confirmed && needs_http_confirmation(url) {
        next.model_source = ModelSource::Mirror(url.to_owned());
        next.confirmed_http_mirror = Some(url.to_owned());
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_mirrors_need_a_confirmation() {
        assert!(needs_http_confirmation("http://mirror.example/models"));
        assert!(needs_http_confirmation("http://localhost.evil.example"));
        assert!(!needs_http_confirmation("http://localhost:8080/hf"));
        assert!(!needs_http_confirmation("https://mirror.example"));
        assert!(!needs_http_confirmation("http://"));
        assert!(!needs_http_confirmation("http://a b.example"));
        let mut s = Settings::default();
        assert!(!apply_mirror(&mut s, "http://mirror.example/m", false));
        assert_eq!(s.model_source, ModelSource::HuggingFace);
        assert!(apply_mirror(&mut s, " http://mirror.example/m ", true));
        assert_eq!(
            s.model_source,
            ModelSource::Mirror("http://mirror.example/m".into())
        );
        assert_eq!(
            s.confirmed_http_mirror.as_deref(),
            Some("http://mirror.example/m")
        );
        assert!(apply_mirror(&mut s, "https://mirror.example/m", true));
        assert_eq!(s.confirmed_http_mirror, None);
        assert!(!apply_mirror(&mut s, "javascript:alert(1)", true));
    }

    #[test]
    fn mirror_urls() {
        assert!(is_valid_mirror("https://mirror.example/models"));
        assert!(is_valid_mirror(" https://m.example "));
        assert!(is_valid_mirror("http://localhost:8080/hf"));
        assert!(is_valid_mirror("http://127.0.0.1:9000"));
        assert!(!is_valid_mirror("http://mirror.example"));
        assert!(!is_valid_mirror("https://"));
        assert!(!is_valid_mirror("javascript:alert(1)"));
        assert!(!is_valid_mirror("https://a b.example"));
        assert!(!is_valid_mirror(""));
        assert!(!is_valid_mirror("http://localhost.evil.example"));
        assert!(!is_valid_mirror("https:///path"));
    }
}
