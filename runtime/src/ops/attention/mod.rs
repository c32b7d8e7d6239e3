//! Attention: GroupQueryAttention (com.microsoft; rotary, sliding window, softcap, bias, KV cache
//! append), RotaryEmbedding (com.microsoft and ai.onnx opset 23) and, in [`sdpa`], the ai.onnx
//! `Attention` and com.microsoft `MultiHeadAttention` ops.
//!
//! | file | what |
//! |---|---|
//! | `gqa.rs` | GroupQueryAttention: checks the node's inputs, selects the kernels, encodes them |
//! | `kv_append.rs` | its KV cache append (`present` = past + the new rows, keys rotated) |
//! | `flash.rs` | the attention kernel (`gqa.wgsl`) and its query forms, shared by fused groups |
//! | `regs.rs` | a prompt's attention on software adapters, in register-blocked passes |
//! | `rotary.rs` | tensor views, cos/sin tables, `rope` and the RotaryEmbedding ops |
//! | `sdpa.rs` | ai.onnx `Attention` and com.microsoft `MultiHeadAttention` |
//! | `sdpa_kv.rs` | their present K/V (the new tokens appended head-major after the past) |

mod flash;
mod gqa;
mod kv_append;
mod mha;
mod regs;
mod rotary;
pub mod sdpa;
mod sdpa_kv;

use super::{MS, Registry};

pub(crate) use flash::{
    Bias, Flash, Query, flash_attention, flash_bindings, shared_query_bindings,
};
pub(crate) use rotary::{Layout, RotaryPair};

/// Registers the family.
pub fn register(r: &mut Registry) {
    r.register(MS, "GroupQueryAttention", gqa::gqa);
    r.register(MS, "RotaryEmbedding", |a| rotary::rotary(a, true));
    r.register("", "RotaryEmbedding", |a| rotary::rotary(a, false));
}
