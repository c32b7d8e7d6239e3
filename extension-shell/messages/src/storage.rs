//! Where the per-site data lives, and the migration from the old single settings item.
//!
//! - `chrome.storage.sync["settings"]`: the small user settings ([`crate::Settings`]) only.
//! - `chrome.storage.local`, one key per site, written by the service worker only:
//!   - [`PERMISSIONS_PREFIX`]`<origin>` (`site:https://example.com`): what the user allowed
//!     "always on this site" there, `{"alwaysAllowed": [...]}` (the agent's
//!     [`gg_agent::Permission`]s; `run_javascript` is never stored, see
//!     [`gg_agent::Permission::can_persist`]). The origin is normalized by [`gg_agent::site_key`].
//!   - [`DISABLED_PREFIX`]`<host>` (`disabled:example.com`): `true` when Gemma Gem is turned off
//!     on that host (any scheme and port, as `disabledHosts` always matched). The content script
//!     reads only the key of its own page.
//!
//! Older versions kept both inside the synced settings item (`disabledHosts`,
//! `sitePermissions`). [`migrate`] moves them into the local keys (merged with what is there),
//! and the settings item is rewritten without them, so the migration runs once per old item.

use gg_agent::{Permission, SitePermissions, site_key};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Prefix of the local key holding one origin's permissions.
pub const PERMISSIONS_PREFIX: &str = "site:";
/// Prefix of the local key saying that Gemma Gem is turned off on one host, the host of a site,
/// and its key (shared with the content script, which reads the key of its page).
pub use gg_vocab::{DISABLED_PREFIX, disabled_key, host_of};
/// The fields of the old settings item that moved to `chrome.storage.local`.
pub const OLD_FIELDS: [&str; 2] = ["disabledHosts", "sitePermissions"];

/// The local key of the permissions of the origin of `site` (`None` for URLs without one).
pub fn permissions_key(site: &str) -> Option<String> {
    let key = site_key(site);
    (key.contains("://") && !key.ends_with("://")).then(|| format!("{PERMISSIONS_PREFIX}{key}"))
}

/// The value stored under a [`permissions_key`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SiteRecord {
    pub always_allowed: Vec<Permission>,
}

/// Every origin's permissions, read from the items of `chrome.storage.local` (other keys are
/// ignored, and so is a damaged record, and any permission that cannot persist).
pub fn permissions_from(items: &Map<String, Value>) -> SitePermissions {
    let mut all = SitePermissions::default();
    for (key, value) in items {
        let Some(site) = key.strip_prefix(PERMISSIONS_PREFIX) else {
            continue;
        };
        let Ok(record) = serde_json::from_value::<SiteRecord>(value.clone()) else {
            continue;
        };
        for permission in record.always_allowed {
            all.allow_always(site, permission);
        }
    }
    all
}

/// The record of `site` in `all`, as stored (`None`: nothing granted, the key is removed).
pub fn record_of(all: &SitePermissions, site: &str) -> Option<Value> {
    let policy = all.policy(site)?;
    let always_allowed: Vec<Permission> = policy
        .always_allowed
        .iter()
        .filter(|p| p.can_persist())
        .cloned()
        .collect();
    if always_allowed.is_empty() {
        return None;
    }
    serde_json::to_value(SiteRecord { always_allowed }).ok()
}

/// The hosts Gemma Gem is turned off on, sorted.
pub fn disabled_hosts_from(items: &Map<String, Value>) -> Vec<String> {
    let mut hosts: Vec<String> = items
        .iter()
        .filter(|(_, v)| v.as_bool() == Some(true))
        .filter_map(|(k, _)| k.strip_prefix(DISABLED_PREFIX))
        .map(str::to_owned)
        .collect();
    hosts.sort();
    hosts
}

/// Whether the local `items` turn Gemma Gem off for the page at `url`.
pub fn is_disabled(items: &Map<String, Value>, url: &str) -> bool {
    disabled_key(url).is_some_and(|key| items.get(&key).and_then(Value::as_bool) == Some(true))
}

/// What [`migrate`] found to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Migration {
    /// The settings item without the old fields (everything else as it was).
    pub settings: Value,
    /// Local keys to write (merged with what was stored).
    pub local: Map<String, Value>,
    /// Entries of the old item that could not be read (reported, not kept).
    pub dropped: Vec<String>,
}

/// The migration of an old settings item (`None` when it has no old fields: nothing to do).
/// `local` is what `chrome.storage.local` holds now; grants already there are kept and the old
/// ones added. `run_javascript` grants are not carried over (never kept for good).
pub fn migrate(settings: &Value, local: &Map<String, Value>) -> Option<Migration> {
    let object = settings.as_object()?;
    if !OLD_FIELDS.iter().any(|f| object.contains_key(*f)) {
        return None;
    }
    let mut out = Migration {
        settings: Value::Object(Map::new()),
        local: Map::new(),
        dropped: Vec::new(),
    };
    let mut rest = object.clone();
    for field in OLD_FIELDS {
        rest.remove(field);
    }
    out.settings = Value::Object(rest);

    match object.get("disabledHosts") {
        Some(Value::Array(hosts)) => {
            for entry in hosts {
                match entry.as_str().and_then(disabled_key) {
                    Some(key) => {
                        out.local.insert(key, Value::Bool(true));
                    }
                    None => out.dropped.push(format!("disabled host {entry}")),
                }
            }
        }
        None | Some(Value::Null) => {}
        Some(other) => out.dropped.push(format!("disabledHosts {other}")),
    }

    if let Some(old) = object.get("sitePermissions").filter(|v| !v.is_null()) {
        match serde_json::from_value::<SitePermissions>(old.clone()) {
            Ok(old) => {
                let mut merged = permissions_from(local);
                for (site, policy) in old.sites() {
                    for permission in &policy.always_allowed {
                        merged.allow_always(site, permission.clone());
                    }
                    // `disabled` of the agent's own record meant the same as a disabled host.
                    if policy.disabled
                        && let Some(key) = disabled_key(site)
                    {
                        out.local.insert(key, Value::Bool(true));
                    }
                }
                for (site, _) in old.sites() {
                    let Some(key) = permissions_key(site) else {
                        out.dropped.push(format!("permissions of {site:?}"));
                        continue;
                    };
                    if let Some(record) = record_of(&merged, site) {
                        out.local.insert(key, record);
                    }
                }
            }
            Err(e) => out.dropped.push(format!("sitePermissions ({e})")),
        }
    }
    Some(out)
}

/// Whether a model source is plain `http://` to another machine: its files could be changed on
/// the way, so it is used only after the user confirmed that address in the settings.
/// `http://localhost` and `http://127.0.0.1` (and `[::1]`) are this machine: allowed as they are.
pub fn needs_http_confirmation(source: &str) -> bool {
    let source = source.trim();
    let Some(rest) = source
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("http://"))
        .map(|_| &source[7..])
    else {
        return false;
    };
    let local = host_of(&format!("http://{rest}"))
        .is_some_and(|h| h == "localhost" || h == "127.0.0.1" || h == "[::1]");
    !local
}

/// Why settings, a model source or a permission may not be stored (the text is what the overlay
/// shows).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CheckError {
    /// A plain `http://` model source to another machine that the user did not confirm.
    #[error(
        "The model source {0} is plain http://: its files could be changed on the way. Confirm this address in the settings (Model source) to use it, or use an https:// address."
    )]
    UnconfirmedHttp(String),
    /// `run_javascript` (and whatever else may not persist).
    #[error("{0:?} is never allowed for good; it was allowed for this task only")]
    NeverForGood(Permission),
    #[error("could not save the permission: {0:?} has no origin")]
    NoOrigin(String),
    /// The site named is not the one the tab shows.
    #[error("could not save the permission: it names {named}, but this tab shows {shown}")]
    OtherSite { named: String, shown: String },
    #[error("unknown model size {0:?} (E2B or E4B)")]
    ModelSize(String),
    #[error("the temperature is not a number")]
    Temperature,
    #[error("the model source {0:?} is not an address")]
    NotAnAddress(String),
    #[error(
        "{0} soft tokens per image is not a budget the model supports (70, 140, 280, 560 or 1120)"
    )]
    ImageTokens(u32),
}

/// Whether the settings may download from their model source: anything but plain `http://` to
/// another machine, or that exact address confirmed by the user.
pub fn check_model_source(source: &str, confirmed_http: &str) -> Result<(), CheckError> {
    if needs_http_confirmation(source) && source.trim() != confirmed_http.trim() {
        return Err(CheckError::UnconfirmedHttp(source.trim().to_owned()));
    }
    Ok(())
}

/// Whether an overlay may store "always on this site" for `site`: only a permission that may
/// persist (never `run_javascript`), and only for the origin its tab shows (`tab_url`).
pub fn check_grant(site: &str, permission: &Permission, tab_url: &str) -> Result<(), CheckError> {
    if !permission.can_persist() {
        return Err(CheckError::NeverForGood(permission.clone()));
    }
    if permissions_key(site).is_none() {
        return Err(CheckError::NoOrigin(site.to_owned()));
    }
    if site_key(site) != site_key(tab_url) {
        return Err(CheckError::OtherSite {
            named: site_key(site),
            shown: site_key(tab_url),
        });
    }
    Ok(())
}

/// The range of `maxIterations` the settings accept.
pub const MAX_ITERATIONS_RANGE: (u32, u32) = (1, 50);
/// The range of `temperature` the settings accept.
pub const TEMPERATURE_RANGE: (f32, f32) = (0.0, 2.0);

/// Settings an overlay asked to store, checked: values out of range are brought into it, an
/// unknown model size or a plain `http://` model source that was not confirmed is refused.
pub fn checked_settings(mut s: crate::Settings) -> Result<crate::Settings, CheckError> {
    if !s.model_size.eq_ignore_ascii_case("E2B") && !s.model_size.eq_ignore_ascii_case("E4B") {
        return Err(CheckError::ModelSize(s.model_size));
    }
    s.model_size = s.model_size.to_ascii_uppercase();
    s.max_iterations = s
        .max_iterations
        .clamp(MAX_ITERATIONS_RANGE.0, MAX_ITERATIONS_RANGE.1);
    if !s.temperature.is_finite() {
        return Err(CheckError::Temperature);
    }
    s.temperature = s
        .temperature
        .clamp(TEMPERATURE_RANGE.0, TEMPERATURE_RANGE.1);
    if !gg_agent::IMAGE_TOKEN_BUDGETS.contains(&s.image_tokens) {
        return Err(CheckError::ImageTokens(s.image_tokens));
    }
    s.model_source = s.model_source.trim().to_owned();
    if s.model_source
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(CheckError::NotAnAddress(s.model_source));
    }
    if !needs_http_confirmation(&s.model_source) {
        // Nothing to confirm: a confirmation kept for later would apply silently.
        s.confirmed_http_mirror.clear();
    }
    check_model_source(&s.model_source, &s.confirmed_http_mirror)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gg_agent::SensitiveField;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn key_scheme() {
        assert_eq!(
            disabled_key("https://Bank.Example.:8443/login").as_deref(),
            Some("disabled:bank.example")
        );
        assert_eq!(
            disabled_key("bank.example").as_deref(),
            Some("disabled:bank.example")
        );
        assert_eq!(
            disabled_key("http://[::1]:8080/").as_deref(),
            Some("disabled:[::1]")
        );
        assert_eq!(disabled_key(""), None);
        assert_eq!(disabled_key("https://a b/"), None);
        assert_eq!(disabled_key("https://x\"y/"), None);
        assert_eq!(
            permissions_key("https://A.example:443/x?y").as_deref(),
            Some("site:https://a.example")
        );
        assert_eq!(
            permissions_key("http://127.0.0.1:9000/").as_deref(),
            Some("site:http://127.0.0.1:9000")
        );
        assert_eq!(permissions_key("about:blank"), None);
    }

    #[test]
    fn records_round_trip_without_run_javascript() {
        let mut all = SitePermissions::default();
        all.allow_always("https://a.example/x", Permission::SubmitForm);
        all.allow_always(
            "https://a.example",
            Permission::TypeIntoField(SensitiveField::Password),
        );
        let record = record_of(&all, "https://a.example").unwrap();
        assert_eq!(
            record,
            json!({"alwaysAllowed": [{"type_into_field": "password"}, "submit_form"]})
        );
        // A record written by hand (or by an old version) with run_javascript: not loaded.
        let items = map(json!({
            "site:https://a.example": record,
            "site:https://b.example": {"alwaysAllowed": ["run_javascript", "submit_form"]},
            "site:https://c.example": "garbage",
            "launcherCorner": "top-left",
            "disabled:d.example": true,
        }));
        let loaded = permissions_from(&items);
        assert_eq!(loaded.sites().count(), 2);
        assert!(loaded.is_allowed("https://a.example", &Permission::SubmitForm));
        assert!(loaded.is_allowed("https://b.example", &Permission::SubmitForm));
        assert!(!loaded.is_allowed("https://b.example", &Permission::RunJavascript));
        assert!(record_of(&loaded, "https://c.example").is_none());
        assert_eq!(disabled_hosts_from(&items), vec!["d.example"]);
        assert!(is_disabled(&items, "https://D.example:8080/x"));
        assert!(!is_disabled(&items, "https://www.d.example/"));
        assert!(!is_disabled(&items, "about:blank"));
    }

    #[test]
    fn migration_moves_the_old_fields_once_and_keeps_the_rest() {
        let old = json!({
            "modelSize": "E4B",
            "thinking": true,
            "disabledHosts": ["Bank.example", "http://127.0.0.1:9000/x", 7],
            "sitePermissions": {"sites": {
                "https://shop.example": {"disabled": false, "always_allowed": [
                    "submit_form", "run_javascript", {"consequential": "purchase"}
                ]},
                "https://off.example": {"disabled": true, "always_allowed": []},
            }},
        });
        let local = map(json!({
            "site:https://shop.example": {"alwaysAllowed": [{"type_into_field": "password"}]},
            "launcherCorner": "top-left",
        }));
        let m = migrate(&old, &local).unwrap();
        assert_eq!(m.settings, json!({"modelSize": "E4B", "thinking": true}));
        assert_eq!(m.local["disabled:bank.example"], json!(true));
        assert_eq!(m.local["disabled:127.0.0.1"], json!(true));
        assert_eq!(m.local["disabled:off.example"], json!(true));
        assert_eq!(m.dropped, vec!["disabled host 7".to_owned()]);
        // Merged with what was there; run_javascript is not carried over.
        let mut after = local.clone();
        after.extend(m.local.clone());
        let all = permissions_from(&after);
        for p in [
            Permission::SubmitForm,
            Permission::TypeIntoField(SensitiveField::Password),
            Permission::Consequential(gg_agent::ActionKind::Purchase),
        ] {
            assert!(all.is_allowed("https://shop.example", &p), "{p:?}");
        }
        assert!(!all.is_allowed("https://shop.example", &Permission::RunJavascript));
        assert!(!m.local.contains_key("site:https://off.example"));
        // The rewritten item has nothing left to migrate: it runs once.
        assert_eq!(migrate(&m.settings, &after), None);
        // The settings are still read with their values.
        let s: crate::Settings = serde_json::from_value(m.settings).unwrap();
        assert_eq!(s.model_size, "E4B");
        assert!(s.thinking);
    }

    #[test]
    fn migration_of_empty_and_damaged_items() {
        let empty = map(json!({}));
        assert_eq!(migrate(&json!({"thinking": true}), &empty), None);
        assert_eq!(migrate(&json!(null), &empty), None);
        let m = migrate(&json!({"disabledHosts": [], "sitePermissions": {}}), &empty).unwrap();
        assert_eq!(m.settings, json!({}));
        assert!(m.local.is_empty());
        let m = migrate(
            &json!({"disabledHosts": "x", "sitePermissions": "garbage", "maxIterations": 4}),
            &empty,
        )
        .unwrap();
        assert_eq!(m.settings, json!({"maxIterations": 4}));
        assert!(m.local.is_empty());
        assert_eq!(m.dropped.len(), 2);
    }

    #[test]
    fn grants_only_for_the_tabs_origin_and_never_javascript() {
        let tab = "https://shop.example/cart?x=1";
        assert_eq!(
            check_grant("https://shop.example", &Permission::SubmitForm, tab),
            Ok(())
        );
        assert_eq!(
            check_grant("https://SHOP.example:443/", &Permission::SubmitForm, tab),
            Ok(())
        );
        let js = check_grant("https://shop.example", &Permission::RunJavascript, tab)
            .unwrap_err()
            .to_string();
        assert!(js.contains("never allowed for good"), "{js}");
        let other = check_grant("https://bank.example", &Permission::SubmitForm, tab)
            .unwrap_err()
            .to_string();
        assert!(
            other.contains("this tab shows https://shop.example"),
            "{other}"
        );
        assert!(check_grant("http://shop.example", &Permission::SubmitForm, tab).is_err());
        assert!(check_grant("about:blank", &Permission::SubmitForm, "about:blank").is_err());
    }

    #[test]
    fn settings_are_checked_before_they_are_stored() {
        let s = checked_settings(crate::Settings {
            model_size: "e4b".into(),
            max_iterations: 500,
            temperature: 9.0,
            model_source: " https://mirror.example/m ".into(),
            confirmed_http_mirror: "http://old.example/m".into(),
            ..crate::Settings::default()
        })
        .unwrap();
        assert_eq!(s.model_size, "E4B");
        assert_eq!(s.max_iterations, 50);
        assert_eq!(s.temperature, 2.0);
        assert_eq!(s.model_source, "https://mirror.example/m");
        assert_eq!(s.confirmed_http_mirror, "");
        let bad = |f: fn(&mut crate::Settings)| {
            let mut s = crate::Settings::default();
            f(&mut s);
            checked_settings(s).unwrap_err().to_string()
        };
        assert!(bad(|s| s.model_size = "E9B".into()).contains("model size"));
        assert!(bad(|s| s.temperature = f32::NAN).contains("temperature"));
        assert!(bad(|s| s.image_tokens = 300).contains("300 soft tokens"));
        for n in gg_agent::IMAGE_TOKEN_BUDGETS {
            let s = crate::Settings {
                image_tokens: n,
                ..crate::Settings::default()
            };
            assert_eq!(checked_settings(s).unwrap().image_tokens, n);
        }
        assert!(bad(|s| s.model_source = "http://mirror.example/m".into()).contains("Confirm"));
        let ok = checked_settings(crate::Settings {
            model_source: "http://mirror.example/m".into(),
            confirmed_http_mirror: "http://mirror.example/m".into(),
            ..crate::Settings::default()
        });
        assert!(ok.is_ok());
    }

    #[test]
    fn http_sources_need_a_confirmation_unless_local() {
        for local in [
            "http://localhost:8080/m",
            "http://127.0.0.1:9/models/x",
            "HTTP://LOCALHOST/m",
            "http://[::1]:8080/m",
            "https://mirror.example/m",
            "script:http://127.0.0.1:1/turns.json",
        ] {
            assert!(!needs_http_confirmation(local), "{local}");
            assert_eq!(check_model_source(local, ""), Ok(()));
        }
        for remote in [
            "http://mirror.example/m",
            "http://192.168.1.5/m",
            "http://localhost.evil.example/m",
            "http://127.0.0.1.evil.example/m",
            "Http://mirror.example/m",
        ] {
            assert!(needs_http_confirmation(remote), "{remote}");
            let err = check_model_source(remote, "").unwrap_err().to_string();
            assert!(err.contains("Confirm this address"), "{err}");
            assert_eq!(check_model_source(remote, remote), Ok(()));
            assert!(check_model_source(remote, "http://other.example/m").is_err());
        }
    }
}
