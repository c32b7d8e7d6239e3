//! The downloaded models section.

use yew::prelude::*;

use crate::format;
use crate::types::{ModelChoice, ModelInfo};

/// Properties of [`StorageSection`].
#[derive(Clone, Properties, PartialEq)]
pub(super) struct StorageSectionProps {
    /// Sizes and cache state of the models.
    pub(super) models: Vec<ModelInfo>,
    /// Delete a model's downloaded files.
    pub(super) on_clear_model: Callback<ModelChoice>,
}

/// The models whose files are stored, each with a button that deletes them.
#[function_component(StorageSection)]
pub(super) fn storage_section(props: &StorageSectionProps) -> Html {
    let cached: Vec<&ModelInfo> = props
        .models
        .iter()
        .filter(|m| m.cached_bytes.is_some_and(|b| b > 0))
        .collect();

    html! {
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
    }
}
