//! Hosting the Gemma 4 model in a browser global: the extension's offscreen document (a
//! `Window`) or the embeddable widget's dedicated Worker (a `WorkerGlobalScope`).
//!
//! - [`webgpu`]: what WebGPU offers here, with actionable messages;
//! - [`cache`] and [`download`]: model files into Cache Storage (resumable, hash-checked, quota
//!   checked) and back out as byte streams;
//! - [`model`]: the one loaded model (loaded on demand, joined while loading, reloaded when the
//!   repository changes or the GPU was lost; the vision encoder loaded on the first image), its
//!   progress reported to the sink the host installs ([`model::set_status_sink`]);
//! - [`turn`]: what both hosts do around an agent turn (the model of a `script:` or repository
//!   source, the context clamp, approvals that may arrive before the loop asks);
//! - `scripted` (feature `scripted-model`, development builds): the `script:URL` test model.
//!
//! Nothing here calls a `chrome.*` API: the host decides where reports and events go. Logging
//! is `gg_chrome::log` (the console only).

pub mod cache;
pub mod download;
pub mod model;
pub mod scope;
#[cfg(feature = "scripted-model")]
pub mod scripted;
pub mod turn;
pub mod webgpu;

/// Console logging with the project's prefix (errors and warnings always; info and debug with
/// `gg-chrome/dev-log`).
pub use gg_chrome::log;
