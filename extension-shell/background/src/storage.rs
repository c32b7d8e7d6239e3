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
use gg_chrome::log;
use gg_messages::storage::{self as keys, checked_settings, migrate};
use gg_messages::{Body, SETTINGS_KEY, SenderInfo, Settings};
use serde_json::Value;

/// Moves the per-site data of an old settings item into `chrome.storage.local`, then rewrites
/// the item without it. Nothing happens when the item has no old fields.
pub async fn migrate_if_needed() -> Result<(), String> {
    let Some(stored) = gg_chrome::sync_get(SETTINGS_KEY)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(());
    };
    let local = gg_chrome::local_items().await.map_err(|e| e.to_string())?;
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
            .map_err(|e| format!("could not migrate the per-site settings: {e}"))?;
    }
    gg_chrome::sync_set(SETTINGS_KEY, &m.settings)
        .await
        .map_err(|e| format!("could not migrate the settings: {e}"))?;
    log::info(&format!(
        "migrated the per-site settings to chrome.storage.local ({} keys)",
        m.local.len()
    ));
    Ok(())
}

/// The user's settings (migrated first; defaults when absent or unreadable).
pub async fn settings() -> Settings {
    if let Err(e) = migrate_if_needed().await {
        log::warn(&e);
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

/// Whether `body` is a storage request of an overlay (answered by [`handle`]).
pub fn is_request(body: &Body) -> bool {
    matches!(
        body,
        Body::SaveSettings { .. }
            | Body::SetSiteDisabled { .. }
            | Body::GrantSitePermission { .. }
            | Body::RevokeSitePermission { .. }
    )
}

/// Answers an overlay's storage request: `Ack`, or an error that says what was not saved.
pub async fn handle(body: Body, sender: &SenderInfo) -> Result<Body, String> {
    match body {
        Body::SaveSettings { settings } => {
            let settings = checked_settings(settings)?;
            let json = serde_json::to_value(&settings).map_err(|e| e.to_string())?;
            gg_chrome::sync_set(SETTINGS_KEY, &json)
                .await
                .map_err(|e| format!("could not save the settings: {e}"))?;
        }
        Body::SetSiteDisabled { site, disabled } => {
            let key = keys::disabled_key(&site)
                .ok_or_else(|| format!("{site:?} is not a site address or host name"))?;
            let saved = if disabled {
                let mut items = serde_json::Map::new();
                items.insert(key, Value::Bool(true));
                gg_chrome::local_set(&items).await
            } else {
                gg_chrome::local_remove(&key).await
            };
            saved.map_err(|e| {
                format!(
                    "could not save that Gemma Gem is turned {} on {site}: {e}",
                    if disabled { "off" } else { "on" }
                )
            })?;
        }
        Body::GrantSitePermission { site, permission } => {
            grant(&site, permission, sender).await?;
        }
        Body::RevokeSitePermission { site, permission } => {
            update(&site, |all| {
                all.revoke(&site, &permission);
            })
            .await
            .map_err(|e| format!("could not withdraw the permission: {e}"))?;
        }
        other => return Err(format!("not a storage request: {other:?}")),
    }
    Ok(Body::Ack)
}

/// "Always on this site", from the overlay of the tab where the user answered: only for the
/// origin that tab shows, and only a permission that may persist.
async fn grant(site: &str, permission: Permission, sender: &SenderInfo) -> Result<(), String> {
    let tab = sender
        .tab
        .as_ref()
        .and_then(|t| t.id)
        .ok_or("a permission is granted from a tab's panel")?;
    let top = gg_chrome::top_frame(tab)
        .await
        .map_err(|e| format!("could not save the permission: {e}"))?;
    keys::check_grant(site, &permission, &top.url)?;
    update(site, |all| {
        all.allow_always(site, permission);
    })
    .await
    .map_err(|e| format!("could not save the permission: {e}"))
}

thread_local! {
    /// One read-modify-write of a site's record at a time (requests interleave at each await).
    static WRITING: std::rc::Rc<futures::lock::Mutex<()>> =
        std::rc::Rc::new(futures::lock::Mutex::new(()));
}

/// Reads the record of `site`, changes it, and writes it back (removed when empty).
async fn update(site: &str, change: impl FnOnce(&mut SitePermissions)) -> Result<(), String> {
    let lock = WRITING.with(|w| w.clone());
    let _writing = lock.lock().await;
    let key = keys::permissions_key(site).ok_or_else(|| format!("{site:?} has no origin"))?;
    let mut items = serde_json::Map::new();
    if let Some(v) = gg_chrome::local_get(&key)
        .await
        .map_err(|e| e.to_string())?
    {
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
    .map_err(|e| e.to_string())
}
