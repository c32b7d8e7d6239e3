//! Settings: model, thinking, limits, sites, permissions, model source, downloaded models.
//!
//! Controlled: every change emits the whole new [`Settings`] through `on_change`; the host stores it
//! and passes it back. One component per section:
//!
//! | file | section |
//! |---|---|
//! | `model.rs` | model, thinking mode, max steps, temperature |
//! | `source.rs` | model source (Hugging Face or a mirror; the mirror URL checks) |
//! | `sites.rs` | disabled sites |
//! | `permissions.rs` | site permissions |
//! | `storage.rs` | downloaded models |

mod model;
mod permissions;
mod sites;
mod source;
mod storage;

use wasm_bindgen::JsCast;
use yew::prelude::*;

use crate::types::{ModelChoice, ModelInfo, Settings};

pub use source::{is_valid_mirror, needs_http_confirmation};

/// Properties of [`SettingsPanel`].
#[derive(Clone, Properties, PartialEq)]
pub struct SettingsPanelProps {
    /// The settings shown (controlled: changes come back through `on_change`).
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
    /// The whole new settings after a change.
    pub on_change: Callback<Settings>,
    /// Delete a model's downloaded files.
    #[prop_or_default]
    pub on_clear_model: Callback<ModelChoice>,
    /// Back to the chat.
    #[prop_or_default]
    pub on_close: Callback<()>,
}

/// Properties of a section that edits the settings.
#[derive(Clone, Properties, PartialEq)]
struct SectionProps {
    /// The settings shown.
    settings: Settings,
    /// The whole new settings after a change.
    on_change: Callback<Settings>,
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

/// A change handler: `f` edits a copy of `settings` from the event (`false`: nothing to apply);
/// the copy is emitted when it differs.
fn change(
    settings: &Settings,
    on_change: &Callback<Settings>,
    f: fn(&mut Settings, &Event) -> bool,
) -> Callback<Event> {
    let on_change = on_change.clone();
    let settings = settings.clone();
    Callback::from(move |e: Event| {
        let mut next = settings.clone();
        if f(&mut next, &e) && next != settings {
            on_change.emit(next);
        }
    })
}

/// The settings page of the panel.
#[function_component(SettingsPanel)]
pub fn settings_panel(props: &SettingsPanelProps) -> Html {
    let on_close = props.on_close.reform(|_: MouseEvent| ());
    let settings = &props.settings;
    let on_change = &props.on_change;
    html! {
        <section class="gg-panel" data-fill={props.fill.to_string()} aria-label="Gemma Gem settings">
            <header class="gg-header">
                <h2 class="gg-title">{ "Settings" }</h2>
                <button type="button" class="gg-btn gg-btn-ghost gg-btn-small" data-testid="gg-settings-close" onclick={on_close}>
                    { "Back to chat" }
                </button>
            </header>
            <div class="gg-settings" data-testid="gg-settings">
                <model::ModelSection settings={settings.clone()} models={props.models.clone()} on_change={on_change.clone()} />
                <source::SourceSection settings={settings.clone()} on_change={on_change.clone()} />
                <sites::SitesSection settings={settings.clone()} site={props.site.clone()} on_change={on_change.clone()} />
                <permissions::PermissionsSection settings={settings.clone()} on_change={on_change.clone()} />
                <storage::StorageSection models={props.models.clone()} on_clear_model={props.on_clear_model.clone()} />
            </div>
        </section>
    }
}
