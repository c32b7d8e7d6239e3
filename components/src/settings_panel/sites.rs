//! The disabled sites section.

use yew::prelude::*;

use crate::types::Settings;

/// Properties of [`SitesSection`].
#[derive(Clone, Properties, PartialEq)]
pub(super) struct SitesSectionProps {
    /// The settings shown.
    pub(super) settings: Settings,
    /// The site the UI is shown on (offers "Disable on this site").
    pub(super) site: Option<AttrValue>,
    /// The whole new settings after a change.
    pub(super) on_change: Callback<Settings>,
}

/// The sites Gemma Gem is off on.
#[function_component(SitesSection)]
pub(super) fn sites_section(props: &SitesSectionProps) -> Html {
    let settings = &props.settings;
    let remove_site = |site: String| {
        let on_change = props.on_change.clone();
        let settings = settings.clone();
        Callback::from(move |_: MouseEvent| {
            let mut next = settings.clone();
            next.disabled_sites.retain(|s| *s != site);
            on_change.emit(next);
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
    html! {
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
    }
}
