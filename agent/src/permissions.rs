//! Per-site permission records: what the user allowed "always on this site", and the sites
//! where Gemma Gem is turned off.
//!
//! The agent keeps a [`SitePermissions`] and updates it when the user answers
//! [`ApprovalDecision::AlwaysOnSite`](crate::ApprovalDecision::AlwaysOnSite) (the loop then emits
//! [`AgentEvent::PermissionGranted`](crate::AgentEvent::PermissionGranted)); the extension
//! persists it as JSON (e.g. in `chrome.storage.local`) and restores it with
//! [`Agent::set_permissions`](crate::Agent::set_permissions).
//!
//! ```
//! use gg_agent::{Permission, SensitiveField, SitePermissions};
//!
//! let mut permissions = SitePermissions::default();
//! assert!(permissions.allow_always("https://example.com/some/page", Permission::SubmitForm));
//! assert!(permissions.is_allowed("https://example.com", &Permission::SubmitForm));
//! assert!(!permissions.is_allowed("https://example.com", &Permission::TypeIntoField(SensitiveField::Password)));
//! assert!(!permissions.is_allowed("https://other.example", &Permission::SubmitForm));
//! // Running JavaScript is never allowed for good.
//! assert!(!permissions.allow_always("https://example.com", Permission::RunJavascript));
//! assert!(!permissions.is_allowed("https://example.com", &Permission::RunJavascript));
//!
//! let json = serde_json::to_string(&permissions).unwrap();
//! let restored: SitePermissions = serde_json::from_str(&json).unwrap();
//! assert_eq!(restored, permissions);
//! ```

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::consequential::ActionKind;
use crate::facts::SensitiveField;
use crate::site::site_key;

/// A kind of sensitive call the user can allow on a site for good.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// `run_javascript`. Never kept for good ([`Permission::can_persist`]): at most for the
    /// running task.
    RunJavascript,
    /// Typing into fields of this kind.
    TypeIntoField(SensitiveField),
    /// Submitting forms that have sensitive fields.
    SubmitSensitiveForm,
    /// Submitting forms (any).
    SubmitForm,
    /// Clicking elements that read as this kind of consequential action.
    Consequential(ActionKind),
    /// Navigating from this site to that one.
    LeaveSiteTo {
        /// The destination origin (or URL).
        destination: String,
    },
    /// Using a tool that is not built in.
    Tool {
        /// Its name.
        name: String,
    },
}

impl Permission {
    /// Whether the user may grant this "always on this site". Running arbitrary JavaScript is
    /// never granted for good; a stored grant of it (older versions) is ignored.
    pub fn can_persist(&self) -> bool {
        !matches!(self, Self::RunJavascript)
    }
}

/// What applies on one site.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SitePolicy {
    /// Gemma Gem is turned off here: no overlay, no tool runs.
    pub disabled: bool,
    /// Sensitive calls the user allowed for good.
    pub always_allowed: BTreeSet<Permission>,
}

/// Per-site policies, keyed by normalized origin (see [`site_key`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SitePermissions {
    sites: BTreeMap<String, SitePolicy>,
}

impl SitePermissions {
    /// The policy of `site` (any URL of it), if one was recorded.
    pub fn policy(&self, site: &str) -> Option<&SitePolicy> {
        self.sites.get(&site_key(site))
    }

    /// All recorded sites and their policies.
    pub fn sites(&self) -> impl Iterator<Item = (&str, &SitePolicy)> {
        self.sites
            .iter()
            .map(|(site, policy)| (site.as_str(), policy))
    }

    /// Whether Gemma Gem is turned off on `site`.
    pub fn is_disabled(&self, site: &str) -> bool {
        self.policy(site).is_some_and(|policy| policy.disabled)
    }

    /// Turns Gemma Gem off (or back on) on `site`.
    pub fn set_disabled(&mut self, site: &str, disabled: bool) {
        self.sites.entry(site_key(site)).or_default().disabled = disabled;
        self.prune(site);
    }

    /// Whether `permission` was granted for good on `site` (never for one that
    /// [cannot persist](Permission::can_persist)).
    pub fn is_allowed(&self, site: &str, permission: &Permission) -> bool {
        permission.can_persist()
            && self
                .policy(site)
                .is_some_and(|policy| policy.always_allowed.contains(permission))
    }

    /// Grants `permission` for good on `site`; `true` if it was not granted before. `false`, and
    /// nothing recorded, for a permission that [cannot persist](Permission::can_persist).
    pub fn allow_always(&mut self, site: &str, permission: Permission) -> bool {
        if !permission.can_persist() {
            return false;
        }
        self.sites
            .entry(site_key(site))
            .or_default()
            .always_allowed
            .insert(permission)
    }

    /// Withdraws `permission` on `site`; `true` if it had been granted.
    pub fn revoke(&mut self, site: &str, permission: &Permission) -> bool {
        let removed = self
            .sites
            .get_mut(&site_key(site))
            .is_some_and(|policy| policy.always_allowed.remove(permission));
        self.prune(site);
        removed
    }

    /// Forgets everything about `site`.
    pub fn forget_site(&mut self, site: &str) {
        self.sites.remove(&site_key(site));
    }

    /// Drops the record of `site` when it holds nothing.
    fn prune(&mut self, site: &str) {
        let key = site_key(site);
        if self
            .sites
            .get(&key)
            .is_some_and(|policy| *policy == SitePolicy::default())
        {
            self.sites.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn grants_revokes_and_disables_per_site() {
        let mut permissions = SitePermissions::default();
        let password = Permission::TypeIntoField(SensitiveField::Password);
        assert!(permissions.allow_always("https://a.test/login", password.clone()));
        assert!(!permissions.allow_always("https://A.test:443", password.clone()));
        assert!(permissions.is_allowed("https://a.test/other", &password));
        assert!(!permissions.is_allowed("http://a.test", &password));
        assert!(permissions.revoke("https://a.test", &password));
        assert!(!permissions.revoke("https://a.test", &password));
        assert_eq!(permissions.sites().count(), 0);

        permissions.set_disabled("https://b.test/x", true);
        assert!(permissions.is_disabled("https://b.test"));
        assert!(!permissions.is_disabled("https://a.test"));
        permissions.set_disabled("https://b.test", false);
        assert_eq!(permissions, SitePermissions::default());
    }

    #[test]
    fn serializes_as_plain_json() {
        let mut permissions = SitePermissions::default();
        assert!(!permissions.allow_always("https://a.test", Permission::RunJavascript));
        permissions.allow_always("https://a.test", Permission::SubmitForm);
        permissions.allow_always(
            "https://a.test",
            Permission::LeaveSiteTo {
                destination: "https://b.test".into(),
            },
        );
        permissions.allow_always(
            "https://a.test",
            Permission::TypeIntoField(SensitiveField::OneTimeCode),
        );
        let value = serde_json::to_value(&permissions).unwrap();
        assert_eq!(
            value,
            json!({"sites": {"https://a.test": {"disabled": false, "always_allowed": [
                {"type_into_field": "one_time_code"},
                "submit_form",
                {"leave_site_to": {"destination": "https://b.test"}}
            ]}}})
        );
        let back: SitePermissions = serde_json::from_value(value).unwrap();
        assert_eq!(back, permissions);
        let empty: SitePermissions = serde_json::from_value(json!({})).unwrap();
        assert_eq!(empty, SitePermissions::default());
    }
}
