//! The model section: which model, thinking mode, max steps, temperature, image detail.

use wasm_bindgen::JsCast;
use yew::prelude::*;

use super::{change, target_checked, target_value};
use crate::format;
use crate::types::{ModelChoice, ModelInfo, Settings};

/// Properties of [`ModelSection`].
#[derive(Clone, Properties, PartialEq)]
pub(super) struct ModelSectionProps {
    /// The settings shown.
    pub(super) settings: Settings,
    /// Sizes and cache state of the models.
    pub(super) models: Vec<ModelInfo>,
    /// The whole new settings after a change.
    pub(super) on_change: Callback<Settings>,
}

/// Model, thinking mode, max steps, temperature and image detail.
#[function_component(ModelSection)]
pub(super) fn model_section(props: &ModelSectionProps) -> Html {
    let settings = &props.settings;
    let on_model = change(settings, &props.on_change, |s, e| {
        match target_value(e).as_deref() {
            Some("e2b") => {
                s.model = ModelChoice::E2b;
                true
            }
            Some("e4b") => {
                s.model = ModelChoice::E4b;
                true
            }
            _ => false,
        }
    });
    let on_thinking = change(settings, &props.on_change, |s, e| {
        target_checked(e)
            .map(|checked| s.thinking = checked)
            .is_some()
    });
    let on_constrain = change(settings, &props.on_change, |s, e| {
        target_checked(e)
            .map(|checked| s.constrain_tool_calls = checked)
            .is_some()
    });
    let on_iterations = change(settings, &props.on_change, |s, e| {
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
                // The browser's number (a range input's value), not `f32::from_str`.
                .map(|i| i.value_as_number())
                .filter(|v| v.is_finite());
            if let Some(t) = value.map(|v| v as f32) {
                let mut next = settings.clone();
                next.temperature = t.clamp(min, max);
                if next != settings {
                    on_change.emit(next);
                }
            }
        })
    };
    let on_image_tokens = change(settings, &props.on_change, |s, e| {
        match target_value(e).and_then(|v| v.parse::<u32>().ok()) {
            Some(n) if Settings::IMAGE_TOKENS.contains(&n) => {
                s.image_tokens = n;
                true
            }
            _ => false,
        }
    });
    let image_option = |n: u32| {
        let label = match n {
            70 => "Low (70 tokens per image)".to_owned(),
            280 => "Standard (280 tokens per image)".to_owned(),
            1120 => "Highest (1120 tokens per image)".to_owned(),
            n => format!("{n} tokens per image"),
        };
        html! { <option value={n.to_string()} selected={settings.image_tokens == n}>{ label }</option> }
    };
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
    html! {
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
                    { "Well-formed tool calls" }
                    <span class="gg-field-hint">{ "Restricts the model's tool calls to the tools and arguments that exist, so a call is never malformed." }</span>
                </span>
                <input type="checkbox" class="gg-check" data-testid="gg-setting-constrain-tool-calls" checked={settings.constrain_tool_calls} onchange={on_constrain} />
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
            <label class="gg-field-stack">
                <span>{ "Image detail" }</span>
                <select class="gg-select" data-testid="gg-setting-image-tokens" onchange={on_image_tokens}>
                    { for Settings::IMAGE_TOKENS.into_iter().map(image_option) }
                </select>
                <span class="gg-field-hint">{ "How finely the model sees screenshots and pasted images. More detail uses more of the conversation's context and takes longer." }</span>
            </label>
        </section>
    }
}
