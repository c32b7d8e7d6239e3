//! A prompt's attention on software adapters (SwiftShader, lavapipe) in three register-blocked
//! passes instead of the flash kernel (`gqa.wgsl`): the scores into an f32 scratch
//! (`attn_scores_regs.wgsl`), a softmax over each row's visible keys in place
//! (`attn_softmax_rows.wgsl`), then P·V (`attn_pv_regs.wgsl`).
//!
//! Why: CPU adapters run every load whose address differs between invocations as a per-lane
//! gather, workgroup memory included. The flash kernel stages Q and K, then reads two staged
//! values per multiply-add (for QK and again for PV), and keeps its output in a private array
//! indexed in loops. The passes here keep R x C blocks in distinct variables and load each
//! query, key, probability and value word once per block row or column: a few loads per 16
//! multiply-adds. The price is the scratch, B · kvH · S · G · T floats: long prompts take their
//! query rows in chunks whose scores fit [`Gpu::attention_scratch`](crate::Gpu::attention_scratch).

use super::flash::{AttnParams, Flash, Masking, Query, QueryForm};
use crate::error::Result;
use crate::exec::{Ctx, GpuTensor};
use crate::gpu::{Features, Kernel, KernelSpec, Storage};
use crate::tensor::DType;

const SCORES: &str = include_str!("../../kernels/attention/attn_scores_regs.wgsl");
const SOFTMAX: &str = include_str!("../../kernels/attention/attn_softmax_rows.wgsl");
const PV: &str = include_str!("../../kernels/attention/attn_pv_regs.wgsl");

/// Columns of a block: keys of the scores pass, dimensions of the P·V pass (even).
const C: u32 = 16;

/// Rows of a block: 8, or 4 for up to 4 rows in all.
fn rows_per_block(rows: usize) -> u32 {
    if rows <= 4 { 4 } else { 8 }
}

/// The scores pass's unrolled block: declarations, one step of two dimensions, the stores.
fn scores_code(r: u32, c: u32, k_f16: bool) -> (String, String, String) {
    let (mut decl, mut step, mut store) = (String::new(), String::new(), String::new());
    for i in 0..r {
        decl.push_str(&format!(
            "let ri{i} = min(r0 + {i}u, RE - 1u);\nlet qb{i} = q_base(b, ri{i} / G, kvh * G + ri{i} % G);\n"
        ));
        step.push_str(&format!(
            "let q{i}a = ld_x(qb{i} + d);\nlet q{i}b = ld_x(qb{i} + d + 1u);\n"
        ));
    }
    for j in 0..c {
        decl.push_str(&format!(
            "let kr{j} = kvbase + min(t0 + {j}u, T - 1u) * D;\n"
        ));
        step.push_str(&if k_f16 {
            format!("let k{j} = unpack2x16float(ldw_k((kr{j} + d) >> 1u));\n")
        } else {
            format!("let k{j} = vec2<f32>(ld_k(kr{j} + d), ld_k(kr{j} + d + 1u));\n")
        });
    }
    for i in 0..r {
        for j in 0..c {
            decl.push_str(&format!("var acc{i}_{j} = 0.0;\n"));
            step.push_str(&format!(
                "acc{i}_{j} = acc{i}_{j} + q{i}a * k{j}.x + q{i}b * k{j}.y;\n"
            ));
        }
    }
    for i in 0..r {
        store.push_str(&format!(
            "if (r0 + {i}u < RE) {{\n\
             let s{i} = (r0 + {i}u) / G;\n\
             let g{i} = (r0 + {i}u) % G;\n\
             var first{i} = 0;\n\
             var last{i} = i32(T) - 1;\n\
             if (CAUSAL) {{\n\
             last{i} = pb + i32(s{i});\n\
             if (window > 0) {{ first{i} = max(0, last{i} - window + 1); }}\n\
             }}\n\
             let pr{i} = (bk * NR + r0 + {i}u - R0) * T;\n"
        ));
        for j in 0..c {
            store.push_str(&format!(
                "if (t0 + {j}u < T) {{\n\
                 let t = i32(t0 + {j}u);\n\
                 var v = NEG;\n\
                 if (t >= first{i} && t <= last{i}) {{ v = finish(acc{i}_{j}, b, kvh, g{i}, s{i}, t0 + {j}u); }}\n\
                 stf_p(pr{i} + t0 + {j}u, v);\n\
                 }}\n"
            ));
        }
        store.push_str("}\n");
    }
    (decl, step, store)
}

/// The P·V pass's unrolled block (C dimensions as C / 2 pairs): declarations, one key's step,
/// the stores (f16 pairs when `y_f16`).
fn pv_code(r: u32, c: u32, v_f16: bool, y_f16: bool) -> (String, String, String) {
    let (mut decl, mut step, mut store) = (String::new(), String::new(), String::new());
    let pairs = c / 2;
    for i in 0..r {
        decl.push_str(&format!(
            "let ri{i} = min(r0 + {i}u, RE - 1u);\n\
             let pr{i} = (bk * NR + ri{i} - R0) * T;\n\
             var first{i} = 0;\n\
             var last{i} = i32(T) - 1;\n\
             if (CAUSAL) {{\n\
             last{i} = pb + i32(ri{i} / G);\n\
             if (window > 0) {{ first{i} = max(0, last{i} - window + 1); }}\n\
             }}\n"
        ));
        step.push_str(&format!(
            "let p{i} = select(0.0, ld_p(pr{i} + u32(t)), t >= first{i} && t <= last{i});\n"
        ));
    }
    for j in 0..pairs {
        decl.push_str(&format!("let vd{j} = min(d0 + {}u, D - 2u);\n", 2 * j));
        step.push_str(&if v_f16 {
            format!("let v{j} = unpack2x16float(ldw_v((vrow + vd{j}) >> 1u));\n")
        } else {
            format!("let v{j} = vec2<f32>(ld_v(vrow + vd{j}), ld_v(vrow + vd{j} + 1u));\n")
        });
    }
    for i in 0..r {
        for j in 0..pairs {
            decl.push_str(&format!("var acc{i}_{j} = vec2<f32>(0.0, 0.0);\n"));
            step.push_str(&format!("acc{i}_{j} = acc{i}_{j} + p{i} * v{j};\n"));
        }
    }
    for i in 0..r {
        store.push_str(&format!(
            "if (r0 + {i}u < RE) {{\n\
             let o{i} = ((b * S + (r0 + {i}u) / G) * H + kvh * G + (r0 + {i}u) % G) * D + d0;\n"
        ));
        for j in 0..pairs {
            let d = 2 * j;
            store.push_str(&if y_f16 {
                format!(
                    "if (d0 + {d}u < D) {{ st_y((o{i} + {d}u) >> 1u, acc{i}_{j}.x, acc{i}_{j}.y); }}\n"
                )
            } else {
                format!(
                    "if (d0 + {d}u < D) {{ stf_y(o{i} + {d}u, acc{i}_{j}.x); stf_y(o{i} + {d}u + 1u, acc{i}_{j}.y); }}\n"
                )
            });
        }
        store.push_str("}\n");
    }
    (decl, step, store)
}

/// Runs the attention of `f` with the query `q` (its plain view: the prepared prompt query, or
/// GroupQueryAttention's own without rotary) into `y` [B, S, H * D] when the passes apply:
/// a prompt (S > 1) on a software adapter, D even, and at least one block of rows' scores
/// within [`Gpu::attention_scratch`](crate::Gpu::attention_scratch). Query rows are taken in
/// chunks whose scores fit it (three dispatches per chunk; one chunk up to about 1400 tokens of
/// E2B). Returns whether they ran (else the caller runs the flash kernel).
pub(super) fn prompt_attention(
    cx: &mut Ctx<'_>,
    f: &Flash<'_>,
    q: &Query<'_>,
    y: &GpuTensor,
) -> Result<bool> {
    let [b, s, h, kvh, d, t_len] = f.dims;
    if !(s > 1
        && cx.gpu.tuning.software
        && matches!(q, Query::Gqa { rot: None, .. })
        && d.is_multiple_of(2)
        && kvh > 0
        && h.is_multiple_of(kvh)
        && t_len > 0)
    {
        return Ok(false);
    }
    let rows = s * (h / kvh);
    let r = rows_per_block(rows);
    // Rows per chunk: as many as the scratch holds, whole blocks unless it is all of them.
    let row_bytes = 4 * (b * kvh * t_len) as u64;
    let budget = cx.gpu.attention_scratch.min(cx.gpu.max_weight_part);
    let fit = usize::try_from(budget / row_bytes).unwrap_or(usize::MAX);
    let chunk = if fit >= rows {
        rows
    } else {
        fit / r as usize * r as usize
    };
    if chunk == 0 {
        return Ok(false);
    }
    let p = cx.alloc(DType::F32, vec![b * kvh, chunk, t_len])?;
    let masking = f.masking();
    let scores = cx.gpu.kernel(&ScoresSpec {
        q: q.form(None),
        k: f.k.storage(),
        masking,
        r,
        scale: f.scale.to_bits(),
        softcap: f.softcap.to_bits(),
    })?;
    let softmax = cx.gpu.kernel(&SoftmaxSpec {
        seqlens: masking.seqlens,
    })?;
    let pv = cx.gpu.kernel(&PvSpec {
        v: f.v.storage(),
        seqlens: masking.seqlens,
        y: y.storage(),
        r,
    })?;
    let qp = q.params();
    for r_base in (0..rows).step_by(chunk) {
        let nr = chunk.min(rows - r_base);
        let prm = AttnParams {
            row0: r_base as u32,
            rows: nr as u32,
            ..f.params(&qp)
        };
        let blocks = (b * kvh * nr.div_ceil(r as usize)) as u64;
        let key_blocks = t_len.div_ceil(C as usize) as u64;
        // Pass 1: the scores.
        let bound = f.bind_bias(f.bind_causal(q.bind(scores.bind("k", f.k), None)));
        cx.launch(bound.bind("p", &p), &prm, blocks * key_blocks)?;
        // Pass 2: each row's softmax, in place.
        let bound = f.bind_causal(softmax.bind("p", &p));
        cx.launch(bound, &prm, (b * kvh * nr) as u64)?;
        // Pass 3: y = P·V.
        let dim_blocks = d.div_ceil(C as usize) as u64;
        let bound = f.bind_causal(pv.bind("p", &p).bind("v", f.v).bind("y", y));
        cx.launch(bound, &prm, blocks * dim_blocks)?;
    }
    Ok(true)
}

/// Pass 1 (attn_scores_regs.wgsl): the query reader, K's storage, the masking, the block's
/// rows and the score's scale and softcap (f32 bits).
#[derive(Hash)]
struct ScoresSpec {
    q: QueryForm,
    k: Storage,
    masking: Masking,
    r: u32,
    scale: u32,
    softcap: u32,
}

impl KernelSpec for ScoresSpec {
    const NAME: &'static str = "attn_scores_regs";
    const WGSL: &'static [&'static str] = &[SCORES];
    fn build(&self, _: &Features) -> Kernel {
        let (decl, step, store) = scores_code(self.r, C, self.k == Storage::F16);
        let softcap = crate::gpu::softcap_wgsl("sc", f32::from_bits(self.softcap));
        let kern = Kernel::new("attn_scores_regs", SCORES)
            .params::<AttnParams>()
            .workgroup(64)
            .u32("R", self.r)
            .u32("C", C)
            .f32("SCALE", f32::from_bits(self.scale))
            .code("SOFTCAP", &softcap)
            .code("DECL", &decl)
            .code("STEP", &step)
            .code("STORE", &store);
        let kern = self.q.declare(kern).input("k", self.k);
        self.masking
            .bias(self.masking.causal(kern))
            .output("p", Storage::F32)
    }
}

/// Pass 2 (attn_softmax_rows.wgsl): `seqlens_k`'s storage when causal.
#[derive(Hash)]
struct SoftmaxSpec {
    seqlens: Option<Storage>,
}

impl KernelSpec for SoftmaxSpec {
    const NAME: &'static str = "attn_softmax_rows";
    const WGSL: &'static [&'static str] = &[SOFTMAX];
    fn build(&self, _: &Features) -> Kernel {
        let kern = Kernel::new("attn_softmax_rows", SOFTMAX)
            .params::<AttnParams>()
            .workgroup(64);
        let masking = Masking {
            seqlens: self.seqlens,
            bias: None,
        };
        masking.causal(kern).output("p", Storage::F32)
    }
}

/// Pass 3 (attn_pv_regs.wgsl): V's and y's storages, `seqlens_k`'s when causal, the block's
/// rows.
#[derive(Hash)]
struct PvSpec {
    v: Storage,
    seqlens: Option<Storage>,
    y: Storage,
    r: u32,
}

impl KernelSpec for PvSpec {
    const NAME: &'static str = "attn_pv_regs";
    const WGSL: &'static [&'static str] = &[PV];
    fn build(&self, _: &Features) -> Kernel {
        let (decl, step, store) =
            pv_code(self.r, C, self.v == Storage::F16, self.y == Storage::F16);
        let kern = Kernel::new("attn_pv_regs", PV)
            .params::<AttnParams>()
            .workgroup(64)
            .u32("R", self.r)
            .u32("C", C)
            .code("DECL", &decl)
            .code("STEP", &step)
            .code("STORE", &store)
            .input("p", Storage::F32)
            .input("v", self.v);
        let masking = Masking {
            seqlens: self.seqlens,
            bias: None,
        };
        masking.causal(kern).output("y", self.y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated blocks leave no template keys, keep one accumulator per block element and
    /// load each key or value word once per column (pair) and each probability once per row.
    #[test]
    fn generated_blocks_are_plain_wgsl() {
        for (decl, step, store) in [
            scores_code(8, 16, true),
            scores_code(4, 16, false),
            pv_code(8, 16, true, true),
            pv_code(4, 16, false, false),
        ] {
            for part in [&decl, &step, &store] {
                assert!(!part.contains("{{") && !part.contains("}}}"), "{part}");
            }
        }
        let (decl, step, _) = scores_code(8, 16, true);
        assert_eq!(decl.matches("var acc").count(), 128);
        assert_eq!(step.matches("ldw_k").count(), 16);
        let (decl, step, _) = pv_code(8, 16, true, false);
        assert_eq!(decl.matches("var acc").count(), 64);
        assert_eq!(step.matches("ldw_v").count(), 8);
        assert_eq!(step.matches("ld_p").count(), 8);
    }
}
