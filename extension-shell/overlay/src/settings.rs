//! What is stored <-> the settings the UI edits ([`gg_components::Settings`]). Pure functions,
//! tested natively.
//!
//! Stored: the small settings in `chrome.storage.sync["settings"]` ([`gg_messages::Settings`])
//! and the per-site data in `chrome.storage.local`, one key per site
//! ([`gg_messages::storage`]). The overlay only reads them; every change goes to the service
//! worker as a request ([`Changes`]), which checks and writes it.
//!
//! The UI shows the page's site as its host name (`example.com`), which is also what a
//! disabled-host key holds; "always on this site" permissions are the agent's own
//! [`SitePermissions`], shown one row per (site, permission) and forgotten row by row.

use gg_agent::{Permission, SitePermissions};
use gg_components::{ModelChoice, ModelInfo, ModelSource, SitePermission};
use gg_messages::storage as keys;
use gg_messages::{DEFAULT_MODEL_SOURCE, Settings, StoredModel, model_repository};
use serde_json::{Map, Value};

/// The host name of an origin or URL (`https://example.com:8443/x` -> `example.com`).
pub fn host_of(site: &str) -> String {
    keys::host_of(site).unwrap_or_default()
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

/// Everything the settings panel shows, as stored.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stored {
    pub settings: Settings,
    /// Hosts Gemma Gem is turned off on.
    pub disabled_hosts: Vec<String>,
    pub permissions: SitePermissions,
}

impl Stored {
    /// From the synced settings and the items of `chrome.storage.local`.
    pub fn new(settings: Settings, local: &Map<String, Value>) -> Self {
        Self {
            settings,
            disabled_hosts: keys::disabled_hosts_from(local),
            permissions: keys::permissions_from(local),
        }
    }
}

/// What the service worker is asked to store after an edit in the panel.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Changes {
    /// New synced settings (`None`: unchanged).
    pub settings: Option<Settings>,
    /// Hosts turned off (`true`) or back on (`false`).
    pub disabled: Vec<(String, bool)>,
    /// Permissions the panel no longer lists.
    pub revoked: Vec<(String, Permission)>,
}

/// What the settings panel shows.
pub fn to_ui(stored: &Stored) -> gg_components::Settings {
    let s = &stored.settings;
    let site_permissions = stored
        .permissions
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
        model: if s.model_size.eq_ignore_ascii_case("E4B") {
            ModelChoice::E4b
        } else {
            ModelChoice::E2b
        },
        thinking: s.thinking,
        max_iterations: s.max_iterations,
        temperature: s.temperature,
        disabled_sites: stored.disabled_hosts.clone(),
        site_permissions,
        model_source: ui_source(s),
        confirmed_http_mirror: (!s.confirmed_http_mirror.is_empty())
            .then(|| s.confirmed_http_mirror.clone()),
        image_tokens: s.image_tokens,
        constrain_tool_calls: s.constrain_tool_calls,
    }
}

fn ui_source(s: &Settings) -> ModelSource {
    match s.model_source.trim() {
        "" => ModelSource::HuggingFace,
        x if x == DEFAULT_MODEL_SOURCE => ModelSource::HuggingFace,
        other => ModelSource::Mirror(other.to_owned()),
    }
}

/// What to store after the user edited the settings in the panel. Everything the panel does not
/// edit is kept; hosts and permissions the panel no longer lists are withdrawn.
pub fn from_ui(ui: &gg_components::Settings, stored: &Stored) -> Changes {
    let (lo, hi) = keys::MAX_ITERATIONS_RANGE;
    let (tlo, thi) = keys::TEMPERATURE_RANGE;
    let mut hosts: Vec<String> = Vec::new();
    for site in &ui.disabled_sites {
        let host = host_of(site);
        if !host.is_empty() && !hosts.contains(&host) {
            hosts.push(host);
        }
    }
    let mut disabled: Vec<(String, bool)> = hosts
        .iter()
        .filter(|h| !stored.disabled_hosts.contains(h))
        .map(|h| (h.clone(), true))
        .collect();
    disabled.extend(
        stored
            .disabled_hosts
            .iter()
            .filter(|h| !hosts.contains(h))
            .map(|h| (h.clone(), false)),
    );
    let listed = |site: &str, p: &Permission| {
        let label = permission_label(p);
        ui.site_permissions
            .iter()
            .any(|row| row.allowed && row.site == site && row.tool == label)
    };
    let revoked = stored
        .permissions
        .sites()
        .flat_map(|(site, policy)| {
            policy
                .always_allowed
                .iter()
                .filter(|p| !listed(site, p))
                .map(move |p| (site.to_owned(), p.clone()))
        })
        .collect();
    let model_source = match &ui.model_source {
        ModelSource::HuggingFace => DEFAULT_MODEL_SOURCE.into(),
        ModelSource::Mirror(url) => url.trim().to_owned(),
    };
    let next = Settings {
        model_size: match ui.model {
            ModelChoice::E2b => "E2B".into(),
            ModelChoice::E4b => "E4B".into(),
        },
        thinking: ui.thinking,
        max_iterations: ui.max_iterations.clamp(lo, hi),
        temperature: if ui.temperature.is_finite() {
            ui.temperature.clamp(tlo, thi)
        } else {
            stored.settings.temperature
        },
        confirmed_http_mirror: ui
            .confirmed_http_mirror
            .clone()
            .filter(|c| *c == model_source)
            .unwrap_or_default(),
        model_source,
        // Only a budget the model supports is stored; anything else keeps the stored one.
        image_tokens: if gg_agent::IMAGE_TOKEN_BUDGETS.contains(&ui.image_tokens) {
            ui.image_tokens
        } else {
            stored.settings.image_tokens
        },
        constrain_tool_calls: ui.constrain_tool_calls,
    };
    Changes {
        settings: (next != stored.settings).then_some(next),
        disabled,
        revoked,
    }
}

/// The repository each model of the panel downloads from with these settings. A mirror serves
/// whichever size is chosen, so then only the chosen model has one.
pub fn repositories(stored: &Settings) -> Vec<(ModelChoice, String)> {
    let chosen = if stored.model_size.eq_ignore_ascii_case("E4B") {
        ModelChoice::E4b
    } else {
        ModelChoice::E2b
    };
    let mirror = matches!(ui_source(stored), ModelSource::Mirror(_));
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
        let stored = Stored::default();
        let ui = to_ui(&stored);
        assert_eq!(ui.model, ModelChoice::E2b);
        assert_eq!(ui.model_source, ModelSource::HuggingFace);
        assert!(ui.site_permissions.is_empty());
        // An unchanged panel asks for nothing.
        assert_eq!(from_ui(&ui, &stored), Changes::default());
    }

    #[test]
    fn edits_apply_and_unedited_fields_survive() {
        let local =
            serde_json::json!({"disabled:old.example": true, "disabled:keep.example": true});
        let stored = Stored::new(
            Settings {
                model_source: "script:http://127.0.0.1:1/turns.json".into(),
                ..Settings::default()
            },
            local.as_object().unwrap(),
        );
        let mut ui = to_ui(&stored);
        assert_eq!(
            ui.model_source,
            ModelSource::Mirror("script:http://127.0.0.1:1/turns.json".into())
        );
        assert_eq!(ui.disabled_sites, vec!["keep.example", "old.example"]);
        ui.model = ModelChoice::E4b;
        ui.thinking = true;
        ui.max_iterations = 500;
        ui.temperature = f32::NAN;
        assert_eq!(ui.image_tokens, 280);
        ui.image_tokens = 1120;
        assert!(ui.constrain_tool_calls);
        ui.constrain_tool_calls = false;
        ui.disabled_sites = vec![
            "https://a.example/page".into(),
            "a.example".into(),
            "B.example".into(),
            "keep.example".into(),
            "".into(),
        ];
        let changes = from_ui(&ui, &stored);
        let next = changes.settings.unwrap();
        assert_eq!(next.model_size, "E4B");
        assert!(next.thinking);
        assert_eq!(next.max_iterations, 50);
        assert_eq!(next.temperature, 1.0);
        assert_eq!(next.image_tokens, 1120);
        assert!(!next.constrain_tool_calls);
        assert_eq!(next.model_source, "script:http://127.0.0.1:1/turns.json");
        assert_eq!(
            changes.disabled,
            vec![
                ("a.example".to_owned(), true),
                ("b.example".to_owned(), true),
                ("old.example".to_owned(), false)
            ]
        );
        assert!(changes.revoked.is_empty());
    }

    #[test]
    fn an_http_mirror_is_stored_with_its_confirmation_only() {
        let stored = Stored::default();
        let mut ui = to_ui(&stored);
        ui.model_source = ModelSource::Mirror("http://mirror.example/m".into());
        ui.confirmed_http_mirror = Some("http://mirror.example/m".into());
        let next = from_ui(&ui, &stored).settings.unwrap();
        assert_eq!(next.confirmed_http_mirror, "http://mirror.example/m");
        assert!(gg_messages::storage::checked_settings(next.clone()).is_ok());
        let back = to_ui(&Stored {
            settings: next,
            ..Stored::default()
        });
        assert_eq!(
            back.confirmed_http_mirror.as_deref(),
            Some("http://mirror.example/m")
        );
        // A confirmation of another address does not carry over.
        ui.model_source = ModelSource::Mirror("http://other.example/m".into());
        let next = from_ui(&ui, &stored).settings.unwrap();
        assert_eq!(next.confirmed_http_mirror, "");
        assert!(gg_messages::storage::checked_settings(next).is_err());
    }

    #[test]
    fn granted_permissions_show_and_can_be_forgotten() {
        let mut permissions = SitePermissions::default();
        // Running JavaScript is never granted for good: nothing is stored.
        assert!(!permissions.allow_always("https://a.example/x", Permission::RunJavascript));
        permissions.allow_always("https://a.example/x", Permission::SubmitForm);
        permissions.allow_always(
            "https://b.example",
            Permission::TypeIntoField(SensitiveField::Password),
        );
        // As the service worker stores them: one key per site.
        let mut local = Map::new();
        for site in ["https://a.example", "https://b.example"] {
            local.insert(
                keys::permissions_key(site).unwrap(),
                keys::record_of(&permissions, site).unwrap(),
            );
        }
        let stored = Stored::new(Settings::default(), &local);
        let mut ui = to_ui(&stored);
        assert_eq!(ui.site_permissions.len(), 2);
        assert!(
            ui.site_permissions
                .iter()
                .any(|p| p.tool == "submit forms" && p.site.contains("a.example"))
        );
        // Unchanged panel: nothing withdrawn.
        assert!(from_ui(&ui, &stored).revoked.is_empty());
        // The user forgets the "submit forms" row.
        ui.site_permissions.retain(|p| p.tool != "submit forms");
        let changes = from_ui(&ui, &stored);
        assert_eq!(
            changes.revoked,
            vec![("https://a.example".to_owned(), Permission::SubmitForm)]
        );
        assert_eq!(changes.settings, None);
    }

    #[test]
    fn damaged_permissions_read_as_none() {
        let local = serde_json::json!({"site:https://a.example": "garbage"});
        let stored = Stored::new(Settings::default(), local.as_object().unwrap());
        assert!(to_ui(&stored).site_permissions.is_empty());
    }
}
