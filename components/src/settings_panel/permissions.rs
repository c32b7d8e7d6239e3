//! The site permissions section.

use yew::prelude::*;

use super::SectionProps;

/// What the user allowed or denied "always on this site".
#[function_component(PermissionsSection)]
pub(super) fn permissions_section(props: &SectionProps) -> Html {
    let settings = &props.settings;
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
    html! {
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
    }
}
