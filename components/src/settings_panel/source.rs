//! The model source section: Hugging Face or a mirror URL, and the checks of mirror URLs.

use wasm_bindgen::JsCast;
use yew::prelude::*;

use super::{SectionProps, target_checked, target_value};
use crate::types::{ModelSource, Settings};

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

/// Where the models are downloaded from.
#[function_component(SourceSection)]
pub(super) fn source_section(props: &SectionProps) -> Html {
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
    let mirror_selected = *mirror_chosen || matches!(settings.model_source, ModelSource::Mirror(_));
    let mirror_needs_confirmation = mirror_selected && needs_http_confirmation(&mirror_draft);
    let mirror_invalid =
        mirror_selected && !is_valid_mirror(&mirror_draft) && !mirror_needs_confirmation;
    html! {
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
