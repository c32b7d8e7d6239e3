//! Stored settings (`chrome.storage.sync["settings"]`, [`gg_messages::Settings`]) <-> the settings
//! the UI edits ([`gg_components::Settings`]). Pure functions, tested natively.
//!
//! The UI shows the page's site as its host name (`example.com`), which is also what
//! `disabledHosts` holds; "always on this site" permissions are the agent's own
//! [`SitePermissions`] JSON, shown one row per (site, permission) and forgotten row by row.

use gg_agent::{Permission, SitePermissions};
use gg_components::{ModelChoice, ModelInfo, ModelSource, SitePermission};
use gg_messages::{DEFAULT_MODEL_SOURCE, Settings, StoredModel, model_repository};

/// The host name of an origin or URL (`https://example.com:8443/x` -> `example.com`).
pub fn host_of(site: &str) -> String {
    let rest = site.split_once("://").map_or(site, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let host = if authority.starts_with('[') {
        authority.split_inclusive(']').next().unwrap_or(authority)
    } else {
        authority.split(':').next().unwrap_or(authority)
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// How a permission is shown (and matched when the user forgets one).
pub fn permission_label(permission: &Permission) -> String {
    match permission {
        Permission::RunJavascript => "run_javascript".into(),
        Permission::TypeIntoField(field) => {
            let kind = serde_json::to_value(field)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("{field:?}"));
            format!("type_text into {kind} fields")
        }
        Permission::SubmitSensitiveForm => "submit sensitive forms".into(),
        Permission::SubmitForm => "submit forms".into(),
        Permission::Consequential(kind) => format!("click buttons that {}", kind.describe()),
        Permission::LeaveSiteTo { destination } => format!("navigate to {destination}"),
        Permission::Tool { name } => name.clone(),
    }
}

/// The agent's permissions stored in the settings (none when absent or unreadable).
pub fn permissions(stored: &Settings) -> SitePermissions {
    serde_json::from_value(stored.site_permissions.clone()).unwrap_or_default()
}

fn set_permissions(stored: &mut Settings, permissions: &SitePermissions) {
    stored.site_permissions =
        serde_json::to_value(permissions).unwrap_or_else(|_| serde_json::json!({}));
}

/// Records a permission the user granted with "always on this site"; `true` when it is new.
pub fn grant(stored: &mut Settings, site: &str, permission: Permission) -> bool {
    let mut all = permissions(stored);
    let added = all.allow_always(site, permission);
    set_permissions(stored, &all);
    added
}

/// What the settings panel shows.
pub fn to_ui(stored: &Settings) -> gg_components::Settings {
    let model_source = match stored.model_source.trim() {
        "" => ModelSource::HuggingFace,
        s if s == DEFAULT_MODEL_SOURCE => ModelSource::HuggingFace,
        other => ModelSource::Mirror(other.to_owned()),
    };
    let site_permissions = permissions(stored)
        .sites()
        .flat_map(|(site, policy)| {
            policy.always_allowed.iter().map(move |p| SitePermission {
                site: site.to_owned(),
                tool: permission_label(p),
                allowed: true,
            })
        })
        .collect();
    gg_components::Settings {
        model: if stored.model_size.eq_ignore_ascii_case("E4B") {
            ModelChoice::E4b
        } else {
            ModelChoice::E2b
        },
        thinking: stored.thinking,
        max_iterations: stored.max_iterations,
        temperature: stored.temperature,
        disabled_sites: stored.disabled_hosts.clone(),
        site_permissions,
        model_source,
    }
}

/// The stored settings after the user edited them in the panel. Everything the panel does not
/// edit is kept from `stored`; permissions the panel no longer lists are withdrawn.
pub fn from_ui(ui: &gg_components::Settings, stored: &Settings) -> Settings {
    let (lo, hi) = gg_components::Settings::MAX_ITERATIONS_RANGE;
    let (tlo, thi) = gg_components::Settings::TEMPERATURE_RANGE;
    let mut disabled_hosts: Vec<String> = Vec::new();
    for site in &ui.disabled_sites {
        let host = host_of(site);
        if !host.is_empty() && !disabled_hosts.contains(&host) {
            disabled_hosts.push(host);
        }
    }
    let mut all = permissions(stored);
    let listed = |site: &str, p: &Permission| {
        let label = permission_label(p);
        ui.site_permissions
            .iter()
            .any(|row| row.allowed && row.site == site && row.tool == label)
    };
    let withdrawn: Vec<(String, Permission)> = all
        .sites()
        .flat_map(|(site, policy)| {
            policy
                .always_allowed
                .iter()
                .filter(|p| !listed(site, p))
                .map(move |p| (site.to_owned(), p.clone()))
        })
        .collect();
    for (site, p) in withdrawn {
        all.revoke(&site, &p);
    }
    let mut next = Settings {
        model_size: match ui.model {
            ModelChoice::E2b => "E2B".into(),
            ModelChoice::E4b => "E4B".into(),
        },
        thinking: ui.thinking,
        max_iterations: ui.max_iterations.clamp(lo, hi),
        temperature: if ui.temperature.is_finite() {
            ui.temperature.clamp(tlo, thi)
        } else {
            stored.temperature
        },
        disabled_hosts,
        model_source: match &ui.model_source {
            ModelSource::HuggingFace => DEFAULT_MODEL_SOURCE.into(),
            ModelSource::Mirror(url) => url.trim().to_owned(),
        },
        site_permissions: stored.site_permissions.clone(),
    };
    set_permissions(&mut next, &all);
    next
}

/// The repository each model of the panel downloads from with these settings. A mirror serves
/// whichever size is chosen, so then only the chosen model has one.
pub fn repositories(stored: &Settings) -> Vec<(ModelChoice, String)> {
    let ui = to_ui(stored);
    let chosen = ui.model;
    let mirror = matches!(ui.model_source, ModelSource::Mirror(_));
    ModelChoice::ALL
        .into_iter()
        .filter(|m| !mirror || *m == chosen)
        .map(|m| {
            let size = match m {
                ModelChoice::E2b => "E2B",
                ModelChoice::E4b => "E4B",
            };
            (m, model_repository(&stored.model_source, size))
        })
        // Development sources (`script:`) have nothing in the cache.
        .filter(|(_, repo)| repo.starts_with("https://") || repo.starts_with("http://"))
        .collect()
}

/// The panel's "Downloaded models" from what the offscreen document found stored: a model with
/// nothing stored and no known size is left out.
pub fn model_infos(repos: &[(ModelChoice, String)], stored: &[StoredModel]) -> Vec<ModelInfo> {
    repos
        .iter()
        .filter_map(|(model, repo)| {
            let s = stored.iter().find(|s| s.repository == *repo)?;
            (s.total_bytes > 0 || s.stored_bytes > 0).then(|| ModelInfo {
                model: *model,
                download_bytes: s.total_bytes.max(s.stored_bytes),
                cached_bytes: (s.stored_bytes > 0).then_some(s.stored_bytes),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gg_agent::SensitiveField;

    #[test]
    fn hosts() {
        assert_eq!(host_of("https://Example.com:8443/a?b#c"), "example.com");
        assert_eq!(host_of("http://127.0.0.1:8080"), "127.0.0.1");
        assert_eq!(host_of("example.com"), "example.com");
        assert_eq!(host_of("https://user@example.com/"), "example.com");
        assert_eq!(host_of("http://[::1]:8080/"), "[::1]");
        assert_eq!(host_of(""), "");
    }

    #[test]
    fn repositories_follow_the_source() {
        let repos = repositories(&Settings::default());
        assert_eq!(
            repos,
            vec![
                (ModelChoice::E2b, DEFAULT_MODEL_SOURCE.to_owned()),
                (
                    ModelChoice::E4b,
                    gg_messages::DEFAULT_E4B_MODEL_SOURCE.to_owned()
                )
            ]
        );
        let mirror = Settings {
            model_source: "http://127.0.0.1:9/m/".into(),
            model_size: "E4B".into(),
            ..Settings::default()
        };
        assert_eq!(
            repositories(&mirror),
            vec![(ModelChoice::E4b, "http://127.0.0.1:9/m".to_owned())]
        );
        let script = Settings {
            model_source: "script:http://127.0.0.1:1/turns.json".into(),
            ..Settings::default()
        };
        assert!(repositories(&script).is_empty());
    }

    #[test]
    fn stored_models_become_the_panel_list() {
        let repos = repositories(&Settings::default());
        let stored = |repository: &str, stored_bytes, total_bytes| StoredModel {
            repository: repository.to_owned(),
            stored_bytes,
            total_bytes,
            files: 1,
            complete_files: 0,
        };
        let infos = model_infos(
            &repos,
            &[
                stored(DEFAULT_MODEL_SOURCE, 300, 1000),
                stored(gg_messages::DEFAULT_E4B_MODEL_SOURCE, 0, 0),
                stored("https://elsewhere.example/x", 5, 5),
            ],
        );
        assert_eq!(
            infos,
            vec![ModelInfo {
                model: ModelChoice::E2b,
                download_bytes: 1000,
                cached_bytes: Some(300),
            }]
        );
        assert!(!infos[0].is_cached());
        let done = model_infos(&repos, &[stored(DEFAULT_MODEL_SOURCE, 1000, 1000)]);
        assert!(done[0].is_cached());
    }

    #[test]
    fn defaults_round_trip() {
        let stored = Settings::default();
        let ui = to_ui(&stored);
        assert_eq!(ui.model, ModelChoice::E2b);
        assert_eq!(ui.model_source, ModelSource::HuggingFace);
        assert!(ui.site_permissions.is_empty());
        let back = from_ui(&ui, &stored);
        assert_eq!(back.model_source, DEFAULT_MODEL_SOURCE);
        assert_eq!(back.model_size, "E2B");
        assert_eq!(back.max_iterations, 10);
        assert_eq!(back.site_permissions, serde_json::json!({"sites": {}}));
    }

    #[test]
    fn edits_apply_and_unedited_fields_survive() {
        let stored = Settings {
            model_source: "script:http://127.0.0.1:1/turns.json".into(),
            ..Settings::default()
        };
        let mut ui = to_ui(&stored);
        assert_eq!(
            ui.model_source,
            ModelSource::Mirror("script:http://127.0.0.1:1/turns.json".into())
        );
        ui.model = ModelChoice::E4b;
        ui.thinking = true;
        ui.max_iterations = 500;
        ui.temperature = f32::NAN;
        ui.disabled_sites = vec![
            "https://a.example/page".into(),
            "a.example".into(),
            "B.example".into(),
            "".into(),
        ];
        let next = from_ui(&ui, &stored);
        assert_eq!(next.model_size, "E4B");
        assert!(next.thinking);
        assert_eq!(next.max_iterations, 50);
        assert_eq!(next.temperature, 1.0);
        assert_eq!(next.disabled_hosts, vec!["a.example", "b.example"]);
        assert_eq!(next.model_source, "script:http://127.0.0.1:1/turns.json");
    }

    #[test]
    fn granted_permissions_show_and_can_be_forgotten() {
        let mut stored = Settings::default();
        // Running JavaScript is never granted for good: nothing is stored.
        assert!(!grant(
            &mut stored,
            "https://a.example/x",
            Permission::RunJavascript
        ));
        assert!(to_ui(&stored).site_permissions.is_empty());
        assert!(grant(
            &mut stored,
            "https://a.example/x",
            Permission::SubmitForm
        ));
        assert!(!grant(
            &mut stored,
            "https://a.example",
            Permission::SubmitForm
        ));
        assert!(grant(
            &mut stored,
            "https://b.example",
            Permission::TypeIntoField(SensitiveField::Password)
        ));
        let mut ui = to_ui(&stored);
        assert_eq!(ui.site_permissions.len(), 2);
        assert!(
            ui.site_permissions
                .iter()
                .any(|p| p.tool == "submit forms" && p.site.contains("a.example"))
        );
        // Unchanged panel: nothing withdrawn.
        let same = from_ui(&ui, &stored);
        assert_eq!(permissions(&same), permissions(&stored));
        // The user forgets the "submit forms" row.
        ui.site_permissions.retain(|p| p.tool != "submit forms");
        let next = from_ui(&ui, &stored);
        let all = permissions(&next);
        assert!(!all.is_allowed("https://a.example", &Permission::SubmitForm));
        assert!(all.is_allowed(
            "https://b.example",
            &Permission::TypeIntoField(SensitiveField::Password)
        ));
    }

    #[test]
    fn damaged_permissions_read_as_none() {
        let stored = Settings {
            site_permissions: serde_json::json!("garbage"),
            ..Settings::default()
        };
        assert!(to_ui(&stored).site_permissions.is_empty());
    }
}
