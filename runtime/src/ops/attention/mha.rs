//! com.microsoft MultiHeadAttention: separate BSNH-packed Q/K/V, bias, 2-D/3-D key padding
//! mask, attention bias, KV cache, unidirectional; encoded with the scaled dot-product
//! attention plan of [`super::sdpa`].

use super::sdpa::{Mask, Plan, bnsh, bsnh, f32_out, head_major, opt_gpu, wanted};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, Value};
use crate::ops::{Attrs, Op, req};
use crate::tensor::DType;

/// com.microsoft MultiHeadAttention (separate Q, K, V in [B, S, hidden]).
pub(super) struct Mha {
    heads: usize,
    scale: Option<f32>,
    filter: f32,
    unidirectional: bool,
    wants: [bool; 3],
}

impl Op for Mha {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let q = cx.to_gpu(req(inputs, 0)?)?;
        let k = cx.to_gpu(req(inputs, 1)?)?;
        let v = cx.to_gpu(req(inputs, 2)?)?;
        let bias = opt_gpu(cx, inputs, 3)?;
        let kpm = opt_gpu(cx, inputs, 4)?;
        let ab = opt_gpu(cx, inputs, 5)?;
        let past_k = opt_gpu(cx, inputs, 6)?;
        let past_v = opt_gpu(cx, inputs, 7)?;
        let n = self.heads;
        if q.shape.len() != 3 {
            return Err(op_err(format!(
                "query {:?}: only [B, S, hidden] is supported (not packed QKV)",
                q.shape
            )));
        }
        if k.shape.len() != 3 || v.shape.len() != 3 {
            return Err(op_err(format!(
                "key {:?} / value {:?}: only [B, L, hidden] is supported (not packed KV or \
                 head-major cross-attention keys)",
                k.shape, v.shape
            )));
        }
        let (b, s, l) = (q.shape[0], q.shape[1], k.shape[1]);
        if q.shape[2] % n != 0 || v.shape[2] % n != 0 || k.shape[2] != q.shape[2] {
            return Err(op_err(format!(
                "hidden sizes {} / {} / {} do not split into {n} heads",
                q.shape[2], k.shape[2], v.shape[2]
            )));
        }
        let (h, hv) = (q.shape[2] / n, v.shape[2] / n);
        if k.shape[0] != b || v.shape[0] != b || v.shape[1] != l {
            return Err(op_err(format!(
                "key {:?} / value {:?} do not fit query {:?}",
                k.shape, v.shape, q.shape
            )));
        }
        if past_k.is_some() != past_v.is_some() {
            return Err(op_err("past_key and past_value must be given together"));
        }
        let p = past_k
            .as_ref()
            .map_or(0, |t| t.shape.get(2).copied().unwrap_or(0));
        if let (Some(pk), Some(pv)) = (&past_k, &past_v)
            && (pk.shape != [b, n, p, h] || pv.shape != [b, n, p, hv])
        {
            return Err(op_err(format!(
                "past_key {:?} / past_value {:?} are not [{b}, {n}, P, {h}] / [.., {hv}]",
                pk.shape, pv.shape
            )));
        }
        if let Some(bt) = &bias
            && bt.shape != [2 * n * h + n * hv]
        {
            return Err(op_err(format!(
                "bias {:?} is not [{}]",
                bt.shape,
                2 * n * h + n * hv
            )));
        }
        let t = p + l;
        let bias_at = |o: usize| bias.as_ref().map(|bt| (bt, o));
        let (qv, qs) = match bias_at(0) {
            Some(bo) => (
                head_major(
                    cx,
                    &q,
                    bsnh(n, s, h),
                    0,
                    None,
                    Some(bo),
                    [b, n, s, h],
                    q.dtype,
                )?,
                bnsh(n, s, h),
            ),
            None => (q.clone(), bsnh(n, s, h)),
        };
        let kp = head_major(
            cx,
            &k,
            bsnh(n, l, h),
            0,
            past_k.as_ref(),
            bias_at(n * h),
            [b, n, l, h],
            k.dtype,
        )?;
        let vp = head_major(
            cx,
            &v,
            bsnh(n, l, hv),
            0,
            past_v.as_ref(),
            bias_at(2 * n * h),
            [b, n, l, hv],
            v.dtype,
        )?;
        let mask = match &kpm {
            None => Mask::None,
            Some(m) => {
                if !matches!(m.dtype, DType::I32 | DType::I64) {
                    return Err(op_err(format!(
                        "key_padding_mask of type {} (expected int32)",
                        m.dtype.name()
                    )));
                }
                let st = match m.shape.as_slice() {
                    [mb, mt] if *mb == b && *mt == t => [t, 0, 0, 1],
                    [mb, ms, mt] if *mb == b && *ms == s && *mt == t => [s * t, 0, t, 1],
                    other => {
                        return Err(op_err(format!(
                            "key_padding_mask {other:?}: only [{b}, {t}] and [{b}, {s}, {t}] \
                             are supported"
                        )));
                    }
                };
                Mask::KeyPadding(m, st)
            }
        };
        let attn_bias = match &ab {
            None => None,
            Some(a) => match a.shape.as_slice() {
                [ab_b, ab_n, ab_s, ab_t]
                    if (*ab_b == 1 || *ab_b == b)
                        && (*ab_n == 1 || *ab_n == n)
                        && *ab_s == s
                        && *ab_t == t =>
                {
                    let st = [
                        if *ab_b == 1 { 0 } else { ab_n * s * t },
                        if *ab_n == 1 { 0 } else { s * t },
                        t,
                        1,
                    ];
                    Some((a, st))
                }
                other => {
                    return Err(op_err(format!(
                        "attention_bias {other:?} is not [1|{b}, 1|{n}, {s}, {t}]"
                    )));
                }
            },
        };
        let plan = Plan {
            b,
            s,
            hq: n,
            hkv: n,
            dk: h,
            dv: hv,
            t,
            q: (&qv, qs),
            k: (&kp, bnsh(n, t, h)),
            v: (&vp, bnsh(n, t, hv)),
            mask,
            causal: false,
            offset: p,
            nonpad: None,
            window: (-1, -1),
            filter: self.filter,
            unidirectional: self.unidirectional,
            attn_bias,
            scale: self.scale.unwrap_or(1.0 / (h as f32).sqrt()),
            softcap: 0.0,
        };
        let y = plan.run(cx, vec![b, s, n * hv], bsnh(n, s, hv), q.dtype)?;
        let y = f32_out(cx, y, q.dtype)?;
        let mut outs = vec![Value::Gpu(y)];
        if self.wants[1] || self.wants[2] {
            outs.push(Value::Gpu(kp));
            outs.push(Value::Gpu(vp));
        }
        Ok(outs)
    }
}

pub(super) fn mha(a: &Attrs<'_>) -> Result<Box<dyn Op>> {
    let heads = a.i("num_heads").ok_or_else(|| a.err("missing num_heads"))?;
    if heads <= 0 {
        return Err(a.err(format!("num_heads must be positive, got {heads}")));
    }
    let input = |i: usize| a.node.inputs.get(i).is_some_and(|s| !s.is_empty());
    if !input(1) || !input(2) {
        return Err(a.err("packed QKV (no separate key and value inputs) is not supported"));
    }
    for (i, what) in [(8usize, "past_sequence_length"), (9, "cache_indirection")] {
        if input(i) {
            return Err(a.err(format!("the {what} input is not supported")));
        }
    }
    if a.node.outputs.get(3).is_some_and(|s| !s.is_empty()) {
        return Err(a.err("the qk output is not supported"));
    }
    let scale = a.f_or("scale", 0.0);
    Ok(Box::new(Mha {
        heads: heads as usize,
        scale: (scale != 0.0).then_some(scale),
        filter: a.f_or("mask_filter_value", -10000.0),
        unidirectional: a.i_or("unidirectional", 0) != 0,
        wants: wanted(a),
    }))
}
