//! Synthetic prompts: ids drawn from the vocabulary by a fixed formula, for the bench (which
//! measures the runtime, not the text; the browser bench feeds onnxruntime-web the same ids)
//! and for warming up a model's kernels ([`crate::GemmaModel::warm_up`]).

use crate::model::GemmaModel;

/// `n` prompt ids: `<bos>` (2), then `3 + (i * 7919) mod (vocab - 3)` — the same formula as the
/// browser bench's onnxruntime-web side.
pub fn prompt_ids(n: usize, vocab: usize) -> Vec<u32> {
    let span = vocab.saturating_sub(3).max(1) as u64;
    (0..n)
        .map(|i| {
            if i == 0 {
                2
            } else {
                (3 + (i as u64 * 7919) % span) as u32
            }
        })
        .collect()
}

/// The vocabulary size the synthetic prompts are drawn from.
pub fn vocab_of(model: &GemmaModel) -> usize {
    model
        .config
        .vocab_size
        .unwrap_or_else(|| model.tokenizer.vocab_size())
}
