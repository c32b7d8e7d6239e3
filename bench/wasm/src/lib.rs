//! The browser bench's entry into our runtime: `load(base_url, dtype)` streams a model in the
//! Hugging Face layout from `fetch` into WebGPU, `prefill(n)` and `decode(context, tokens)` run
//! the same measurements as `gemma-gem bench` ([`gg_llm::bench`]). The bench page
//! (`bench/web/index.html`) calls these; nothing here is part of the extension.
//!
//! Only wasm32 has an implementation; natively this crate is empty.

#[cfg(target_arch = "wasm32")]
mod web;

#[cfg(target_arch = "wasm32")]
pub use web::*;
