//! Which overlay may talk for a tab. A page can create an iframe of the overlay itself (if it
//! ever learns the per-session dynamic URL); that overlay must get nothing.
//!
//! The content script asks for a token when it creates the overlay iframe
//! ([`ContentRequest::OverlayTokenRequest`](gg_messages::ContentRequest::OverlayTokenRequest); Chrome names its tab and `documentId`) and puts it in the
//! iframe's URL fragment, which the page cannot read (the iframe is in a closed shadow root of
//! the isolated world, and a cross-origin frame's location is not readable). The overlay
//! presents it in its first message
//! ([`OverlayRequest::ActivateOverlay`](gg_messages::OverlayRequest::ActivateOverlay)). The token is 128 random bits,
//! issued for that tab and that document, and accepted once: then that overlay's `documentId`
//! is the tab's overlay, and every other overlay message of the tab must come from it. A
//! second iframe with the same token, a guessed one, or one presented after the page changed
//! is refused. Tokens and activations live in `chrome.storage.session` (the service worker may
//! be stopped between two messages); one lock makes check-and-use atomic.

use gg_chrome::log;
use gg_messages::{SenderInfo, overlay_key, overlay_token_key};
use std::rc::Rc;

thread_local! {
    static LOCK: Rc<futures::lock::Mutex<()>> = Rc::new(futures::lock::Mutex::new(()));
}

/// Hex digits of a token (128 bits).
const TOKEN_HEX: usize = 32;

/// Why the gate refused a message (its text is what the overlay shows).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    /// An activation without the token issued for this tab and document.
    #[error("this panel was not opened by Gemma Gem here ({0})")]
    NotIssued(Refusal),
    /// A message from an overlay that is not the tab's activated one.
    #[error(
        "this panel was not opened by Gemma Gem on this page; it gets nothing (close it and use \
         the Gemma Gem button)"
    )]
    NotTheTabsOverlay,
    #[error("Chrome did not name the sender's document")]
    NoDocument,
    #[error("cannot tell which page this tab shows: {0}")]
    NoTopFrame(String),
    #[error("crypto.getRandomValues is missing; the panel cannot be opened")]
    NoRandom,
    /// The message came from no tab ([`crate::sender_tab`]).
    #[error("{0}")]
    Sender(#[from] crate::NoTab),
    /// `chrome.storage.session` failed.
    #[error("{0}")]
    Storage(String),
}

/// Why a presented token does not activate an overlay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no token is waiting for this tab")]
    NothingIssued,
    #[error("no valid token")]
    Malformed,
    #[error("wrong token")]
    Wrong,
    #[error("the page changed since the token was issued")]
    PageChanged,
}

/// An issued, unused token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    pub token: String,
    /// The document (the tab's top frame) whose content script asked for it.
    pub document_id: String,
}

impl Issued {
    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "token": self.token, "documentId": self.document_id })
    }

    fn from_json(v: &serde_json::Value) -> Option<Self> {
        Some(Self {
            token: v.get("token")?.as_str()?.to_owned(),
            document_id: v.get("documentId")?.as_str()?.to_owned(),
        })
    }
}

/// Whether `presented` activates an overlay: it must be the unused token issued for this tab,
/// and the tab must still show the document it was issued for (`top_document`).
pub fn accept(
    issued: Option<&Issued>,
    presented: &str,
    top_document: &str,
) -> Result<(), GateError> {
    let refused = |why: Refusal| Err(GateError::NotIssued(why));
    let Some(issued) = issued else {
        return refused(Refusal::NothingIssued);
    };
    if presented.len() != TOKEN_HEX || !presented.bytes().all(|b| b.is_ascii_hexdigit()) {
        return refused(Refusal::Malformed);
    }
    // Not a secret comparison that leaks by timing: each token is tried once per message and
    // a wrong one does not use up the right one, but compare without an early exit anyway.
    let same = issued.token.len() == presented.len()
        && issued
            .token
            .bytes()
            .zip(presented.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if !same {
        return refused(Refusal::Wrong);
    }
    if issued.document_id.is_empty() || issued.document_id != top_document {
        return refused(Refusal::PageChanged);
    }
    Ok(())
}

/// Whether an overlay message comes from the tab's activated overlay (`activated`: its
/// `documentId`).
pub fn allowed(activated: Option<&str>, sender_document: Option<&str>) -> Result<(), GateError> {
    match (activated, sender_document) {
        (Some(a), Some(s)) if !a.is_empty() && a == s => Ok(()),
        _ => Err(GateError::NotTheTabsOverlay),
    }
}

fn document_of(sender: &SenderInfo) -> Result<String, GateError> {
    sender
        .document_id
        .clone()
        .filter(|d| !d.is_empty())
        .ok_or(GateError::NoDocument)
}

/// The tab of a gated message.
fn tab_of(sender: &SenderInfo) -> Result<i64, GateError> {
    Ok(crate::sender_tab(sender)?)
}

/// A content script's token request: a token for the overlay iframe it is about to create.
pub async fn issue(sender: &SenderInfo) -> Result<String, GateError> {
    let tab_id = tab_of(sender)?;
    let issued = Issued {
        token: random_token()?,
        document_id: document_of(sender)?,
    };
    let lock = LOCK.with(Rc::clone);
    let _held = lock.lock().await;
    gg_chrome::session_set(&overlay_token_key(tab_id), &issued.to_json())
        .await
        .map_err(|e| GateError::Storage(e.to_string()))?;
    Ok(issued.token)
}

/// An overlay's first message: it presents `token`, and becomes the tab's overlay when the
/// token is accepted.
pub async fn activate(sender: &SenderInfo, token: &str) -> Result<(), GateError> {
    let tab_id = tab_of(sender)?;
    let overlay = document_of(sender)?;
    let lock = LOCK.with(Rc::clone);
    let _held = lock.lock().await;
    let issued = gg_chrome::session_get(&overlay_token_key(tab_id))
        .await
        .map_err(|e| GateError::Storage(e.to_string()))?
        .as_ref()
        .and_then(Issued::from_json);
    let top = gg_chrome::top_frame(tab_id)
        .await
        .map_err(|e| GateError::NoTopFrame(e.to_string()))?;
    accept(issued.as_ref(), token, &top.document_id)?;
    // Used: no second overlay gets in with it.
    gg_chrome::session_remove(&overlay_token_key(tab_id))
        .await
        .map_err(|e| GateError::Storage(e.to_string()))?;
    gg_chrome::session_set(
        &overlay_key(tab_id),
        &serde_json::json!({ "documentId": overlay }),
    )
    .await
    .map_err(|e| GateError::Storage(e.to_string()))?;
    log::debug(&format!("overlay of tab {tab_id} activated"));
    Ok(())
}

/// Every other overlay message: it must come from the tab's activated overlay.
pub async fn check(sender: &SenderInfo) -> Result<(), GateError> {
    let tab_id = tab_of(sender)?;
    let activated = gg_chrome::session_get(&overlay_key(tab_id))
        .await
        .map_err(|e| GateError::Storage(e.to_string()))?;
    let activated = activated
        .as_ref()
        .and_then(|v| v.get("documentId"))
        .and_then(|d| d.as_str());
    allowed(activated, sender.document_id.as_deref())
}

/// A closed tab: its token and overlay are forgotten.
pub async fn forget(tab_id: i64) {
    for key in [overlay_token_key(tab_id), overlay_key(tab_id)] {
        if let Err(e) = gg_chrome::session_remove(&key).await {
            log::warn(&format!("could not free {key}: {e}"));
        }
    }
}

/// 16 bytes of `crypto.getRandomValues` as hex; an error (never a weak token) without it.
fn random_token() -> Result<String, GateError> {
    use wasm_bindgen::JsCast;
    let bytes = js_sys::Uint8Array::new_with_length(16);
    let crypto = js_sys::Reflect::get(&js_sys::global(), &"crypto".into())
        .unwrap_or(wasm_bindgen::JsValue::UNDEFINED);
    let filled = js_sys::Reflect::get(&crypto, &"getRandomValues".into())
        .ok()
        .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
        .is_some_and(|f| f.call1(&crypto, &bytes).is_ok());
    if !filled {
        return Err(GateError::NoRandom);
    }
    Ok(bytes.to_vec().iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "0123456789abcdef0123456789abcdef";

    fn issued() -> Issued {
        Issued {
            token: T.into(),
            document_id: "DOC-A".into(),
        }
    }

    #[test]
    fn only_the_issued_token_for_the_document_activates() {
        assert_eq!(accept(Some(&issued()), T, "DOC-A"), Ok(()));
        // Nothing issued (used already: a replay), a guess, a near miss, junk.
        assert_eq!(
            accept(None, T, "DOC-A"),
            Err(GateError::NotIssued(Refusal::NothingIssued))
        );
        assert!(
            accept(None, T, "DOC-A")
                .unwrap_err()
                .to_string()
                .contains("no token")
        );
        let guess = "ffffffffffffffffffffffffffffffff";
        assert!(
            accept(Some(&issued()), guess, "DOC-A")
                .unwrap_err()
                .to_string()
                .contains("wrong token")
        );
        let near = "0123456789abcdef0123456789abcdee";
        assert!(accept(Some(&issued()), near, "DOC-A").is_err());
        for junk in [
            "",
            "0123",
            &format!("{T}0"),
            "0123456789abcdef0123456789abcdeg",
        ] {
            assert!(accept(Some(&issued()), junk, "DOC-A").is_err(), "{junk:?}");
        }
        // The tab shows another document now (the page navigated).
        assert!(
            accept(Some(&issued()), T, "DOC-B")
                .unwrap_err()
                .to_string()
                .contains("page changed")
        );
        let empty = Issued {
            token: T.into(),
            document_id: String::new(),
        };
        assert!(accept(Some(&empty), T, "").is_err());
    }

    #[test]
    fn only_the_activated_overlay_is_answered() {
        assert_eq!(allowed(Some("OV-1"), Some("OV-1")), Ok(()));
        assert!(allowed(Some("OV-1"), Some("OV-2")).is_err());
        assert!(allowed(Some("OV-1"), None).is_err());
        assert!(allowed(None, Some("OV-1")).is_err());
        assert!(allowed(Some(""), Some("")).is_err());
    }

    #[test]
    fn issued_tokens_round_trip_through_storage_json() {
        let i = issued();
        assert_eq!(Issued::from_json(&i.to_json()), Some(i));
        assert_eq!(Issued::from_json(&serde_json::json!({ "token": T })), None);
    }
}
