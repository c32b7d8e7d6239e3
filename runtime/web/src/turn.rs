//! What every host does around an agent turn: the model of the turn's source (a `script:URL`
//! test model, or Gemma 4 from a repository, loaded on demand with the agent's context clamped
//! to the model's), and the user's approvals, which may arrive before the loop asks for them.

use crate::download::LoadError;
use futures::FutureExt;
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;
use gg_agent::{Agent, ApprovalDecision, ModelBackend};
use gg_messages::ModelState;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// Why a turn's model source cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[cfg(feature = "scripted-model")]
    #[error("{0}")]
    Scripted(#[from] crate::scripted::ScriptError),
    #[cfg(not(feature = "scripted-model"))]
    #[error("scripted models (`script:` sources) exist only in development builds")]
    ScriptedDevOnly,
}

/// Where the model of a turn comes from.
pub enum TurnModel {
    /// A scripted model (development builds).
    Ready(Rc<dyn ModelBackend>),
    /// Gemma 4 from a repository (loaded, or loaded first).
    Load { repo: String, size: String },
}

impl TurnModel {
    /// The model of a `modelSource` setting: `script:URL` (development builds: the script is
    /// fetched now), else the repository [`gg_messages::model_repository`] names.
    pub async fn for_source(source: &str, size: &str) -> Result<Self, SourceError> {
        match source.trim().strip_prefix("script:") {
            Some(url) => Ok(Self::Ready(scripted_backend(url).await?)),
            None => Ok(Self::Load {
                repo: gg_messages::model_repository(source, size),
                size: size.to_owned(),
            }),
        }
    }

    /// The backend, loading the model if needed (progress goes to the status sink). The agent's
    /// context window and answer length are clamped to what the model's config allows. A load
    /// failure is reported as [`ModelState::Failed`] (`tab_id` names the tab that asked, for the
    /// extension) and returned.
    pub async fn backend(
        self,
        agent: &mut Agent,
        tab_id: Option<i64>,
    ) -> Result<Rc<dyn ModelBackend>, LoadError> {
        let (backend, limit) = self.load(tab_id).await?;
        // The prompt and the answer must fit the model's own context.
        if let Some(limit) = limit {
            clamp_to_context(agent, limit);
        }
        Ok(backend)
    }

    /// The backend and the model's context limit (tokens, when its config states it), loading
    /// the model if needed; a failure is reported as [`ModelState::Failed`] and returned.
    pub async fn load(
        self,
        tab_id: Option<i64>,
    ) -> Result<(Rc<dyn ModelBackend>, Option<usize>), LoadError> {
        let (repo, size) = match self {
            Self::Ready(backend) => return Ok((backend, None)),
            Self::Load { repo, size } => (repo, size),
        };
        match crate::model::backend(&repo, &size).await {
            Ok(backend) => Ok((backend, crate::model::context_limit(&repo))),
            Err(e) => {
                crate::model::report(
                    &size,
                    &repo,
                    ModelState::Failed {
                        tab_id,
                        kind: e.kind,
                        message: e.message.clone(),
                    },
                );
                Err(e)
            }
        }
    }
}

/// Fits the agent's context window (and its answers, at most a quarter of it) into a model's
/// context of `limit` tokens.
pub fn clamp_to_context(agent: &mut Agent, limit: usize) {
    let config = agent.config_mut();
    config.context_window = config.context_window.min(limit);
    let most = u32::try_from(limit / 4).unwrap_or(u32::MAX).max(1);
    config.options.max_new_tokens = config.options.max_new_tokens.min(most);
}

/// The scripted model of a `script:URL` source (development builds only).
async fn scripted_backend(url: &str) -> Result<Rc<dyn ModelBackend>, SourceError> {
    #[cfg(feature = "scripted-model")]
    {
        crate::scripted::ScriptedBackend::for_url(url)
            .await
            .map(|b| b as Rc<dyn ModelBackend>)
            .map_err(SourceError::from)
    }
    #[cfg(not(feature = "scripted-model"))]
    {
        let _ = url;
        Err(SourceError::ScriptedDevOnly)
    }
}

/// The approvals of one running turn, by key (the extension uses the request's nonce, the
/// widget its call id). Only the answer to a request that was shown counts, once; an answer may
/// arrive before the loop waits for it (the UI can be quicker than the loop) and is kept until
/// then. A turn that ends [clears](Approvals::clear) them: a pending wait resolves as
/// [`ApprovalDecision::Deny`].
#[derive(Default)]
pub struct Approvals {
    waiting: HashMap<String, oneshot::Sender<ApprovalDecision>>,
    issued: HashSet<String>,
    early: HashMap<String, ApprovalDecision>,
}

impl Approvals {
    /// A request under `key` was shown to the user (its answer will count).
    pub fn issue(&mut self, key: String) {
        self.issued.insert(key);
    }

    /// The user's answer under `key`. `false` (nothing happens) when no request was shown under
    /// it or it was answered already.
    pub fn answer(&mut self, key: &str, decision: ApprovalDecision) -> bool {
        if key.is_empty() || !self.issued.remove(key) {
            return false;
        }
        match self.waiting.remove(key) {
            Some(tx) => {
                let _ = tx.send(decision);
            }
            None => {
                self.early.insert(key.to_owned(), decision);
            }
        }
        true
    }

    /// The decision under `key`: an answer that already arrived, or the one to come (a
    /// [cleared](Approvals::clear) wait is a denial).
    pub fn wait(&mut self, key: &str) -> LocalBoxFuture<'static, ApprovalDecision> {
        if let Some(decision) = self.early.remove(key) {
            return futures::future::ready(decision).boxed_local();
        }
        let (tx, rx) = oneshot::channel();
        self.waiting.insert(key.to_owned(), tx);
        rx.map(|d| d.unwrap_or(ApprovalDecision::Deny))
            .boxed_local()
    }

    /// Forgets everything (the turn ended): pending waits resolve as denials.
    pub fn clear(&mut self) {
        self.waiting.clear();
        self.issued.clear();
        self.early.clear();
    }
}

/// 16 random bytes (`crypto.getRandomValues`, in windows and workers) as hex; empty (so every
/// approval is refused) when the global has no random source.
pub fn random_nonce() -> String {
    use wasm_bindgen::JsCast;
    let bytes = js_sys::Uint8Array::new_with_length(16);
    let crypto = js_sys::Reflect::get(&js_sys::global(), &"crypto".into())
        .unwrap_or(wasm_bindgen::JsValue::UNDEFINED);
    let filled = js_sys::Reflect::get(&crypto, &"getRandomValues".into())
        .ok()
        .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
        .is_some_and(|f| f.call1(&crypto, &bytes).is_ok());
    if !filled {
        crate::log::error("crypto.getRandomValues is missing; approvals cannot be answered");
        return String::new();
    }
    bytes.to_vec().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;

    #[test]
    fn only_issued_requests_are_answered_once_early_or_late() {
        let mut a = Approvals::default();
        // Not shown: refused.
        assert!(!a.answer("k1", ApprovalDecision::AllowOnce));
        assert!(!a.answer("", ApprovalDecision::AllowOnce));
        // Shown, answered before the loop waits: kept.
        a.issue("k1".into());
        assert!(a.answer("k1", ApprovalDecision::AllowOnce));
        assert!(!a.answer("k1", ApprovalDecision::Deny), "answered once");
        assert_eq!(block_on(a.wait("k1")), ApprovalDecision::AllowOnce);
        // Shown, waited for, then answered.
        a.issue("k2".into());
        let wait = a.wait("k2");
        assert!(a.answer("k2", ApprovalDecision::AlwaysOnSite));
        assert_eq!(block_on(wait), ApprovalDecision::AlwaysOnSite);
        // The turn ends while waiting: a denial.
        a.issue("k3".into());
        let wait = a.wait("k3");
        a.clear();
        assert_eq!(block_on(wait), ApprovalDecision::Deny);
        assert!(!a.answer("k3", ApprovalDecision::AllowOnce));
    }
}
