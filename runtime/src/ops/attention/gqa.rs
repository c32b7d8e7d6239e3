//! GroupQueryAttention (com.microsoft): checks its inputs (packed or separate Q/K/V, zero new
//! K/V tokens on KV-shared layers, rotary, sliding window, softcap, bias), selects the kernel
//! and encodes it (KV append in `kv_append.rs`, the attention itself in `flash.rs`).

use super::flash::{Bias, Flash, Query, flash_attention};
use super::kv_append::{KvAppend, KvDims};
use super::rotary::{Layout, Pos, rope};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor, Value};
use crate::ops::{Attrs, Op, host_in, req};
use crate::tensor::DType;

/// The head size when a GroupQueryAttention node brings zero new K/V tokens (a KV-shared layer:
/// its past is another layer's present, which already holds every token), else `None`. Two
/// forms: key and value `[B, 0, kvH * D]` (what the mobius exporter writes; ONNX Runtime
/// #28242), or both absent with a query of `H * D` only (the head size `D` of the past; a packed
/// query would be `(H + 2 kvH) * D`). Either needs both pasts, `[B, kvH, T, D]`.
pub(super) fn shared_kv_head_size(
    kv: [Option<&Value>; 2],
    [b, hidden, h, kvh]: [usize; 4],
    past: [Option<&GpuTensor>; 2],
) -> Result<Option<usize>> {
    let past_d = |p: Option<&GpuTensor>| p.filter(|t| t.shape.len() == 4).map(|t| t.shape[3]);
    let empty = |v: &Value| v.shape().get(1) == Some(&0);
    let shared = match kv {
        [Some(k), Some(v)] if empty(k) || empty(v) => {
            for (name, t) in [("key", k), ("value", v)] {
                if t.shape().len() != 3 || t.shape()[0] != b || t.shape()[1] != 0 {
                    return Err(op_err(format!(
                        "{name} {:?}: with no new tokens key and value must both be [{b}, 0, kv_hidden]",
                        t.shape()
                    )));
                }
            }
            true
        }
        [Some(k), None] | [None, Some(k)] if empty(k) => {
            return Err(op_err(
                "with no new tokens key and value must both be [B, 0, kv_hidden]",
            ));
        }
        [None, None] => past_d(past[0]).is_some_and(|d| d > 0 && hidden == h * d),
        _ => false,
    };
    if !shared {
        return Ok(None);
    }
    let (Some(pk), Some(pv)) = (past[0], past[1]) else {
        return Err(op_err(
            "no new key/value tokens: past_key and past_value (the shared cache) are required",
        ));
    };
    let d = past_d(Some(pk)).unwrap_or(0);
    if d == 0 || pk.shape[..2] != [b, kvh] || pv.shape != pk.shape {
        return Err(op_err(format!(
            "shared past_key {:?} / past_value {:?} are not both [{b}, {kvh}, T, D]",
            pk.shape, pv.shape
        )));
    }
    if hidden != h * d {
        return Err(op_err(format!(
            "query hidden size {hidden} does not fit {h} heads of the shared cache's head size {d}"
        )));
    }
    if let [Some(k), _] = kv
        && k.shape().get(2) != Some(&(kvh * d))
    {
        return Err(op_err(format!(
            "empty key {:?} is not [{b}, 0, {}]",
            k.shape(),
            kvh * d
        )));
    }
    Ok(Some(d))
}

pub(super) struct Gqa {
    pub(super) heads: usize,
    pub(super) kv_heads: usize,
    pub(super) scale: Option<f32>,
    pub(super) softcap: f32,
    pub(super) window: i64,
    pub(super) rotary: bool,
    pub(super) interleaved: bool,
}

impl Op for Gqa {
    fn host_inputs(&self) -> &[usize] {
        &[6]
    }
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let opt = |cx: &mut Ctx<'_>, i: usize| -> Result<Option<GpuTensor>> {
            match inputs.get(i).copied().flatten() {
                Some(v) if v.numel() > 0 || i == 3 || i == 4 => Ok(Some(cx.to_gpu(v)?)),
                _ => Ok(None),
            }
        };
        // The past K and V given up by their owner (this node's inputs hold them alone): the
        // presents may grow in their buffers.
        let sole = |i: usize| matches!(inputs.get(i).copied().flatten(), Some(Value::Gpu(t)) if t.is_sole_owner());
        let donated = sole(3) && sole(4);
        // Where the new rows start, when the host knows seqlens_k (batch 1).
        let new_from = match inputs.get(5).copied().flatten() {
            Some(Value::Host(h)) if h.numel() == 1 => h.to_i64().first().copied(),
            _ => None,
        };
        let q_in = cx.to_gpu(req(inputs, 0)?)?;
        let key = opt(cx, 1)?;
        let value = opt(cx, 2)?;
        let past_k = opt(cx, 3)?;
        let past_v = opt(cx, 4)?;
        let seqlens = cx.to_gpu(req(inputs, 5)?)?;
        let total = host_in(inputs, 6)?
            .to_i64()
            .first()
            .copied()
            .ok_or_else(|| op_err("total_sequence_length is empty"))?;
        let cos = opt(cx, 7)?;
        let sin = opt(cx, 8)?;
        if inputs.get(9).copied().flatten().is_some() {
            return Err(op_err(
                "position_ids input is not supported (positions come from seqlens_k)",
            ));
        }
        let bias = opt(cx, 10)?;
        if q_in.shape.len() != 3 {
            return Err(op_err(format!(
                "query must be [B, S, hidden], got {:?}",
                q_in.shape
            )));
        }
        let (b, s, hidden) = (q_in.shape[0], q_in.shape[1], q_in.shape[2]);
        let (h, kvh) = (self.heads, self.kv_heads);
        // Zero new K/V tokens (Gemma 4's KV-shared layers, ONNX Runtime #28242): the past is
        // another layer's present and already holds every token, the query's included.
        let shared = shared_kv_head_size(
            [
                inputs.get(1).copied().flatten(),
                inputs.get(2).copied().flatten(),
            ],
            [b, hidden, h, kvh],
            [past_k.as_ref(), past_v.as_ref()],
        )?;
        let packed = key.is_none() && shared.is_none();
        let d = match shared {
            Some(d) => d,
            None if packed => hidden / (h + 2 * kvh),
            None => hidden / h,
        };
        if d == 0 || (packed && hidden != (h + 2 * kvh) * d) || (!packed && hidden != h * d) {
            return Err(op_err(format!(
                "query hidden size {hidden} does not fit {h} heads (+{kvh} kv heads)"
            )));
        }
        let p = past_k
            .as_ref()
            .map_or(0, |t| t.shape.get(2).copied().unwrap_or(0));
        let t_len =
            p.max(usize::try_from(total).map_err(|_| op_err("negative total_sequence_length"))?);
        if shared.is_some() && t_len > p {
            return Err(op_err(format!(
                "total_sequence_length {total} exceeds the shared past's {p} rows (no new tokens)"
            )));
        }
        if seqlens.numel() != b {
            return Err(op_err(format!(
                "seqlens_k has {} entries for batch {b}",
                seqlens.numel()
            )));
        }
        let rot = if self.rotary {
            let (c, sn) = (
                cos.as_ref()
                    .ok_or_else(|| op_err("do_rotary needs cos_cache"))?,
                sin.as_ref()
                    .ok_or_else(|| op_err("do_rotary needs sin_cache"))?,
            );
            Some((c, sn))
        } else {
            None
        };
        // Positions 0 .. total - 1 index the caches' rows: a shorter cache would be read out of
        // bounds (ONNX Runtime refuses it the same way: "cos_cache dimension 0 shall not be less
        // than total_sequence_length").
        if let Some((c, sn)) = rot {
            let rows = c.shape.first().copied().unwrap_or(0);
            if c.shape.len() != 2 || sn.shape != c.shape {
                return Err(op_err(format!(
                    "cos_cache {:?} and sin_cache {:?} must both be [max positions, rotary dim / 2]",
                    c.shape, sn.shape
                )));
            }
            if rows < t_len {
                return Err(op_err(format!(
                    "cos_cache has {rows} rows, fewer than the {t_len} positions of \
                     total_sequence_length: the sequence is longer than the model's rotary tables"
                )));
            }
        }
        let rot_dim = rot.map_or(0, |(c, _)| c.shape.last().copied().unwrap_or(0) * 2);
        if rot_dim > d {
            return Err(op_err(format!(
                "rotary dim {rot_dim} exceeds head size {d}"
            )));
        }
        // The query [B, S, H, D] is read (and rotated) by the attention kernel itself; new K
        // (rotated) and V are read from their [B, S, kvH, D] views by the append.
        let row = if packed { hidden } else { h * d };
        let ql = Layout {
            b,
            s,
            h,
            d,
            strides: [s * row, row, d],
            off: 0,
        };
        let (k_src, k_off, k_row) = match &key {
            Some(k) => (k, 0, kvh * d),
            None => (&q_in, h * d, hidden),
        };
        let (v_src, v_off, v_row) = match &value {
            Some(v) => (v, 0, kvh * d),
            None => (&q_in, (h + kvh) * d, hidden),
        };
        let kv_dtype = past_k.as_ref().map_or(q_in.dtype, |t| t.dtype);
        let kl = Layout {
            b,
            s,
            h: kvh,
            d,
            strides: [s * k_row, k_row, d],
            off: k_off,
        };
        let vl = Layout {
            b,
            s,
            h: kvh,
            d,
            strides: [s * v_row, v_row, d],
            off: v_off,
        };
        let (present_k, present_v) = match (shared, &past_k, &past_v) {
            // Nothing to append: the presents are the pasts (no copy, no dispatch). The keys a
            // query sees end at seqlens_k[b] (its own position), as with new tokens.
            (Some(_), Some(pk), Some(pv)) => {
                if let Some(last) = new_from
                    && !(0..t_len as i64).contains(&last)
                {
                    return Err(op_err(format!(
                        "seqlens_k {last} is outside the shared past of {t_len} rows"
                    )));
                }
                (pk.clone(), pv.clone())
            }
            _ => {
                let job = KvAppend {
                    src: [(k_src, &kl), (v_src, &vl)],
                    rot: rot.map(|(c, sn)| (c, sn, rot_dim)),
                    seqlens: &seqlens,
                    dims: KvDims {
                        b,
                        kv_heads: kvh,
                        t: t_len,
                        d,
                        s,
                        past: p,
                    },
                };
                self.append(
                    cx,
                    &job,
                    [past_k.as_ref(), past_v.as_ref()],
                    kv_dtype,
                    donated.then(|| new_from.map_or(0, |v| v + 1 - s as i64)),
                )?
            }
        };
        let bias = match &bias {
            Some(bt) => {
                if bt.shape.len() != 4
                    || bt.shape[2] != s
                    || bt.shape[3] < t_len.min(total as usize)
                {
                    return Err(op_err(format!(
                        "attention_bias {:?} is not [B|1, H|1, {s}, {total}]",
                        bt.shape
                    )));
                }
                let tb = bt.shape[3];
                let sb = if bt.shape[0] == 1 {
                    0
                } else {
                    bt.shape[1] * s * tb
                };
                let sh = if bt.shape[1] == 1 { 0 } else { s * tb };
                Some(Bias {
                    t: bt,
                    off: 0,
                    sb,
                    skv: sh * (h / kvh),
                    sg: sh,
                    ss: tb,
                })
            }
            None => None,
        };
        let mut flash = Flash {
            q: Query::Gqa {
                x: &q_in,
                l: ql,
                rot: rot.map(|(c, sn)| (c, sn, rot_dim)),
                interleaved: self.interleaved,
            },
            k: &present_k,
            v: &present_v,
            seqlens: Some(&seqlens),
            dims: [b, s, h, kvh, d, t_len],
            scale: self.scale.unwrap_or(1.0 / (d as f32).sqrt()),
            softcap: self.softcap,
            window: self.window,
            bias,
            out_dtype: q_in.dtype,
        };
        // Too few storage bindings for the query's rotary inside the kernel: rotate it first.
        let rotated;
        if rot.is_some() && flash.bindings() > cx.gpu.max_bindings() {
            rotated = rope(
                cx,
                &q_in,
                &ql,
                rot,
                Pos::Seqlens(&seqlens),
                self.interleaved,
                rot_dim,
                false,
                DType::F32,
            )?;
            flash.q = Query::Gqa {
                x: &rotated,
                l: Layout {
                    b,
                    s,
                    h,
                    d,
                    strides: [s * h * d, h * d, d],
                    off: 0,
                },
                rot: None,
                interleaved: false,
            };
        }
        let y = flash_attention(cx, &flash)?;
        Ok(vec![
            Value::Gpu(y),
            Value::Gpu(present_k),
            Value::Gpu(present_v),
        ])
    }
}

pub(super) fn gqa(a: &Attrs<'_>) -> Result<Box<dyn Op>> {
    let heads = a.i("num_heads").ok_or_else(|| a.err("missing num_heads"))?;
    let kv_heads = a
        .i("kv_num_heads")
        .ok_or_else(|| a.err("missing kv_num_heads"))?;
    if heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 {
        return Err(a.err(format!(
            "num_heads {heads} is not a multiple of kv_num_heads {kv_heads}"
        )));
    }
    a.reject_nonzero(&["smooth_softmax", "qk_output"])?;
    for (i, what) in [(9usize, "position_ids"), (11, "head_sink")] {
        if a.node.inputs.get(i).is_some_and(|s| !s.is_empty()) {
            return Err(a.err(format!("{what} input is not supported")));
        }
    }
    let scale = a.f_or("scale", 0.0);
    Ok(Box::new(Gqa {
        heads: heads as usize,
        kv_heads: kv_heads as usize,
        scale: (scale != 0.0).then_some(scale),
        softcap: a.f_or("softcap", 0.0),
        window: a.i_or("local_window_size", -1),
        rotary: a.i_or("do_rotary", 0) != 0,
        interleaved: a.i_or("rotary_interleaved", 0) != 0,
    }))
}
