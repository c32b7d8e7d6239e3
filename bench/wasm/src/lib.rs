//! The browser bench's entry into our runtime: `load(base_url, dtype)` streams a model in the
//! Hugging Face layout from `fetch` into WebGPU; `generation(ids)` starts a greedy generation
//! whose `first()` / `next(last)` steps the bench page (`bench/web/bench.mjs`) awaits and times
//! with `performance.now()`, exactly as it times onnxruntime-web and transformers.js;
//! `decode_in_call(context, tokens)` measures decode inside a constrained tool call
//! (`gg_llm::bench::decode_in_call`, ours only: the peers have no constraint);
//! `load_vision(base_url)` loads a model's vision encoder, whose `encode(image)` the page times
//! from the host patches of a synthetic image to the features read back. Nothing here is part of
//! the extension.
//!
//! Only wasm32 has an implementation; natively this crate is empty.

#[cfg(target_arch = "wasm32")]
mod web;

#[cfg(target_arch = "wasm32")]
pub use web::*;
