//! The service worker is the only writer of the settings (`chrome.storage.sync["settings"]`)
//! and of the per-site data (`chrome.storage.local`, one key per site: see
//! [`gg_messages::storage`]). Overlays ask for a change with a message; each request is checked
//! (the sender was checked before, by `SenderInfo::check`) and its failure answered, so the
//! overlay shows it.
//!
//! The old format (disabled hosts and permissions inside the synced settings item) is migrated
//! when the service worker starts, when the synced item changes (another device, an older
//! version) and before the settings are read.

use gg_agent::{Permission, SitePermissions};
use gg_chrome::{ChromeError, log};
use gg_messages::storage::{self as keys, CheckError, checked_settings, migrate};
use gg_messages::{SETTINGS_KEY, SenderInfo, Settings};
use serde_json::Value;

/// Why the settings or a site's data were not read, migrated or saved (the text is what the
/// overlay shows).
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{0}")]
    Chrome(#[from] ChromeError),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// The request was refused ([`gg_messages::storage`]'s checks).
    #[error("{0}")]
    Check(#[from] CheckError),
    #[error("could not migrate the per-site settings: {0}")]
    MigrateLocal(ChromeError),
    #[error("could not migrate the settings: {0}")]
    MigrateSync(ChromeError),
    #[error("could not save the settings: {0}")]
    SaveSettings(ChromeError),
    #[error("{0:?} is not a site address or host name")]
    NotASite(String),
    /// `state`: `"off"` or `"on"`.
    #[error("could not save that Gemma Gem is turned {state} on {site}: {source}")]
    SaveDisabled {
        state: &'static str,
        site: String,
        source: ChromeError,
    },
    #[error("could not withdraw the permission: {0}")]
    Withdraw(Box<StorageError>),
    #[error("could not save the permission: {0}")]
    SavePermission(Box<StorageError>),
    #[error("a permission is granted from a tab's panel")]
    GrantWithoutTab,
    #[error("{0:?} has no origin")]
    NoOrigin(String),
}

/// Moves the per-site data of an old settings item into `chrome.storage.local`, then rewrites
/// the item without it. Nothing happens when the item has no old fields.
pub async fn migrate_if_needed() -> Result<(), StorageError> {
    let Some(stored) = gg_chrome::sync_get(SETTINGS_KEY).await? else {
        return Ok(());
    };
    let local = gg_chrome::local_items().await?;
    let Some(m) = migrate(&stored, &local) else {
        return Ok(());
    };
    for dropped in &m.dropped {
        log::warn(&format!("not migrated (unreadable): {dropped}"));
    }
    // Local first: if the second write fails, the next start migrates again (merging is
    // idempotent) and nothing is lost.
    if !m.local.is_empty() {
        gg_chrome::local_set(&m.local)
            .await
            .map_err(StorageError::MigrateLocal)?;
    }
    gg_chrome::sync_set(SETTINGS_KEY, &m.settings)
        .await
        .map_err(StorageError::MigrateSync)?;
    log::info(&format!(
        "migrated the per-site settings to chrome.storage.local ({} keys)",
        m.local.len()
    ));
    Ok(())
}

/// The user's settings (migrated first; defaults when absent or unreadable).
pub async fn settings() -> Settings {
    if let Err(e) = migrate_if_needed().await {
        log::warn(&e.to_string());
    }
    match gg_chrome::sync_get(SETTINGS_KEY).await {
        Ok(Some(v)) => serde_json::from_value(v).unwrap_or_else(|e| {
            log::warn(&format!(
                "stored settings are invalid ({e}); using the defaults"
            ));
            Settings::default()
        }),
        Ok(None) => Settings::default(),
        Err(e) => {
            log::warn(&e.to_string());
            Settings::default()
        }
    }
}

/// Every stored "always on this site" permission, as the agent's JSON.
pub async fn site_permissions() -> Value {
    match gg_chrome::local_items().await {
        Ok(items) => serde_json::to_value(keys::permissions_from(&items))
            .unwrap_or_else(|_| Value::Object(Default::default())),
        Err(e) => {
            log::warn(&format!("could not read the site permissions: {e}"));
            Value::Object(Default::default())
        }
    }
}

/// Whether the user turned Gemma Gem off on the host of `url`.
pub async fn is_disabled(url: &str) -> bool {
    let Some(key) = keys::disabled_key(url) else {
        return false;
    };
    match gg_chrome::local_get(&key).await {
        Ok(v) => v.and_then(|v| v.as_bool()) == Some(true),
        Err(e) => {
            // Unknown: treat the site as turned off rather than act on it.
            log::warn(&format!("could not read {key}: {e}"));
            true
        }
    }
}

/// `SaveSettings` of an overlay: checked, then stored.
pub async fn save_settings(settings: Settings) -> Result<(), StorageError> {
    let settings = checked_settings(settings)?;
    let json = serde_json::to_value(&settings)?;
    gg_chrome::sync_set(SETTINGS_KEY, &json)
        .await
        .map_err(StorageError::SaveSettings)
}

/// `SetSiteDisabled` of an overlay: Gemma Gem turned off (or back on) on the host of `site`.
pub async fn set_site_disabled(site: String, disabled: bool) -> Result<(), StorageError> {
    let key = keys::disabled_key(&site).ok_or_else(|| StorageError::NotASite(site.clone()))?;
    let saved = if disabled {
        let mut items = serde_json::Map::new();
        items.insert(key, Value::Bool(true));
        gg_chrome::local_set(&items).await
    } else {
        gg_chrome::local_remove(&key).await
    };
    saved.map_err(|source| StorageError::SaveDisabled {
        state: if disabled { "off" } else { "on" },
        site,
        source,
    })
}

/// `RevokeSitePermission` of an overlay.
pub async fn revoke(site: &str, permission: &Permission) -> Result<(), StorageError> {
    update(site, |all| {
        all.revoke(site, permission);
    })
    .await
    .map_err(|e| StorageError::Withdraw(Box::new(e)))
}

/// "Always on this site", from the overlay of the tab where the user answered: only for the
/// origin that tab shows, and only a permission that may persist.
pub async fn grant(
    site: &str,
    permission: Permission,
    sender: &SenderInfo,
) -> Result<(), StorageError> {
    let tab = sender
        .tab
        .as_ref()
        .and_then(|t| t.id)
        .ok_or(StorageError::GrantWithoutTab)?;
    let top = gg_chrome::top_frame(tab)
        .await
        .map_err(|e| StorageError::SavePermission(Box::new(e.into())))?;
    keys::check_grant(site, &permission, &top.url)?;
    update(site, |all| {
        all.allow_always(site, permission);
    })
    .await
    .map_err(|e| StorageError::SavePermission(Box::new(e)))
}

thread_local! {
    /// One read-modify-write of a site's record at a time (requests interleave at each await).
    static WRITING: std::rc::Rc<futures::lock::Mutex<()>> =
        std::rc::Rc::new(futures::lock::Mutex::new(()));
}

/// Reads the record of `site`, changes it, and writes it back (removed when empty).
async fn update(site: &str, change: impl FnOnce(&mut SitePermissions)) -> Result<(), StorageError> {
    let lock = WRITING.with(|w| w.clone());
    let _writing = lock.lock().await;
    let key = keys::permissions_key(site).ok_or_else(|| StorageError::NoOrigin(site.to_owned()))?;
    let mut items = serde_json::Map::new();
    if let Some(v) = gg_chrome::local_get(&key).await? {
        items.insert(key.clone(), v);
    }
    let mut all = keys::permissions_from(&items);
    change(&mut all);
    match keys::record_of(&all, site) {
        Some(record) => {
            let mut items = serde_json::Map::new();
            items.insert(key, record);
            gg_chrome::local_set(&items).await
        }
        None => gg_chrome::local_remove(&key).await,
    }
    .map_err(StorageError::from)
}
