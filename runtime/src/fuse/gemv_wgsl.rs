//! WGSL fragments of the fused GEMV's code.

use super::gemv::Epilogue;
use crate::exec::{GpuTensor, Value};
use crate::tensor::DType;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// The fused GEMV's per-column sum of its TPC lanes' partial sums (r0, r1 -> a0, a1): a tree in
/// workgroup memory ...
pub(super) const REDUCE_TREE: &str = include_str!("wgsl/reduce_tree.wgsl");
/// ... or a butterfly of subgroup shuffles (the lanes are consecutive in one subgroup).
pub(super) const REDUCE_SHUFFLE: &str = include_str!("wgsl/reduce_shuffle.wgsl");

/// The body of the fused kernels' `rd()`: rounding to f16 for f16 activations (the unfused
/// graph stores every result as f16), the identity for f32.
pub(super) fn rd_code(f16: bool) -> &'static str {
    if f16 {
        "return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0))).x;"
    } else {
        "return x;"
    }
}

/// WGSL `dot{j}(n, lane) -> array<f32, REPS>`: lane `lane`'s share (blocks lane, lane + TPC, ..)
/// of the dot products of weight `j`'s columns n, n + COLS, .. (REPS of them, clamped to the
/// dispatch's last column) with the staged row, written out for distinct accumulators so that each
/// load of the row serves every column. `wide`: the bits are read four words per load
/// (`ldv_qw{j}`, whole quant blocks of 16 bytes), otherwise a word per load.
pub(super) fn gemv_dot(j: usize, reps: u32, wide: bool) -> Rc<str> {
    thread_local! {
        /// The functions made so far: a decode step asks for the same few every time.
        static MADE: RefCell<HashMap<(usize, u32, bool), Rc<str>>> = RefCell::default();
    }
    MADE.with(|m| {
        m.borrow_mut()
            .entry((j, reps, wide))
            .or_insert_with(|| make_gemv_dot(j, reps, wide).into())
            .clone()
    })
}

pub(super) fn make_gemv_dot(j: usize, reps: u32, wide: bool) -> String {
    let rs = 0..reps;
    let each = |f: &dyn Fn(u32) -> String| rs.clone().map(f).collect::<Vec<_>>().join("\n");
    let body = if wide {
        let words = (0..4)
            .map(|c| {
                format!(
                    "{{
                let eo = xeo(i0 + {c}u);
                let e = eo[0];
                let o = eo[1];
                {}
            }}",
                    each(&|r| format!(
                        "s{r} = s{r} + dot(nib_lo(q{r}[{c}]), e) + dot(nib_hi(q{r}[{c}]), o);"
                    ))
                )
            })
            .collect::<Vec<_>>()
            .join("\n            ");
        format!(
            "for (var u = 0u; u < BLOB_WORDS / 4u; u = u + 1u) {{
            let i0 = b * BLOB_WORDS + 4u * u;
            {loads}
            {words}
        }}",
            loads = each(&|r| format!("let q{r} = ldv_qw{j}((wb{r} >> 2u) + u);")),
        )
    } else {
        format!(
            "for (var w = 0u; w < BLOB_WORDS; w = w + 1u) {{
            let i = b * BLOB_WORDS + w;
            let eo = xeo(i);
            let e = eo[0];
            let o = eo[1];
            {}
        }}",
            each(&|r| format!(
                "let q{r} = ldw_qw{j}(wb{r} + w); s{r} = s{r} + dot(nib_lo(q{r}), e) + dot(nib_hi(q{r}), o);"
            ))
        )
    };
    format!(
        "fn dot{j}(n: u32, lane: u32) -> array<f32, REPS> {{
    {cols}
    {accs}
    for (var b = lane; b < NB; b = b + TPC) {{
        {wbs}
        {body}
        let bs = bsum[b];
        {acc}
    }}
    return array<f32, REPS>({ret});
}}
",
        cols = each(&|r| format!("let n{r} = min(n + {r}u * COLS, prm[3] - 1u);")),
        accs = each(&|r| format!("var acc{r} = 0.0;")),
        wbs = each(&|r| format!(
            "let wb{r} = ((n{r} - prm[2]) * NB + b) * BLOB_WORDS; var s{r} = 0.0;"
        )),
        acc = each(&|r| format!(
            "acc{r} = acc{r} + ld_sc{j}(n{r} * NB + b) * (s{r} - zero{j}(n{r}, b) * bs);"
        )),
        ret = rs
            .clone()
            .map(|r| format!("acc{r}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// WGSL `dot{j}(n, lane) -> array<f32, REPS>` for float weight `j` (`[K, N]` f32, `N` = `n`,
/// element `i` read by the expression `ld`): as [`gemv_dot`], lane `lane`'s share (row words
/// lane, lane + TPC, .. of 8 elements each) of the dot products of columns n, n + COLS, .. with
/// the staged row. Elements past `K` (the staging's padding) count as zero.
pub(super) fn float_dot(j: usize, reps: u32, n: usize, ld: &str) -> String {
    let each = |f: &dyn Fn(u32) -> String| (0..reps).map(f).collect::<Vec<_>>().join("\n        ");
    let w = |r: u32, o: [u32; 4]| {
        format!(
            "vec4<f32>(wf{j}(k0 + {}u, n{r}), wf{j}(k0 + {}u, n{r}), wf{j}(k0 + {}u, n{r}), wf{j}(k0 + {}u, n{r}))",
            o[0], o[1], o[2], o[3]
        )
    };
    format!(
        "fn wf{j}(k: u32, c: u32) -> f32 {{
    let i = min(k, K - 1u) * {n}u + c;
    return select(0.0, {ld}, k < K);
}}
fn dot{j}(n: u32, lane: u32) -> array<f32, REPS> {{
    {cols}
    {accs}
    for (var b = lane; b < NB; b = b + TPC) {{
        let eo = xeo(b);
        let k0 = 8u * b;
        {acc}
    }}
    return array<f32, REPS>({ret});
}}
",
        cols = each(&|r| format!("let n{r} = min(n + {r}u * COLS, prm[3] - 1u);")),
        accs = each(&|r| format!("var acc{r} = 0.0;")),
        acc = each(&|r| format!(
            "acc{r} = acc{r} + dot({}, eo[0]) + dot({}, eo[1]);",
            w(r, [0, 2, 4, 6]),
            w(r, [1, 3, 5, 7])
        )),
        ret = (0..reps)
            .map(|r| format!("acc{r}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// WGSL for results that are ranges of one output binding `y` (from `Ctx::alloc_pack`): for
/// result `j`, `st_y{j}(w, v0, v1)` stores word `w` of its range, and `EPW_y{j}` is `EPW_y`.
/// `meta`: the ranges' first words are read from the parameters (`prm[meta + j]`, for results
/// whose sizes change from run to run, e.g. with the prompt's length) instead of written into
/// the code.
pub(super) fn packed_stores(ys: &[GpuTensor], meta: Option<usize>) -> String {
    ys.iter()
        .enumerate()
        .map(|(j, y)| {
            let at = match meta {
                Some(m) => format!("prm[{}]", m + j),
                None => format!("{}u", y.byte_offset() / 4),
            };
            format!(
                "const EPW_y{j}: u32 = EPW_y;\nfn st_y{j}(w: u32, v0: f32, v1: f32) {{ st_y(w + {at}, v0, v1); }}\n"
            )
        })
        .collect()
}

/// The fused GEMV's residual prologue `h = res + RMSNorm(o) [* scalar]` into the staged row
/// (`residual_prologue.wgsl`), `eps` the norm's epsilon; `scaled`: times the layer scalar;
/// `h_out`: the first workgroup also stores h (`store_h.wgsl`).
pub(super) fn residual_prologue(eps: f32, scaled: bool, h_out: bool) -> String {
    let h = if scaled {
        "rd(rd(ld_res(l) + rd(ld_o(l) * inv1 * ld_g1(l))) * scalar)"
    } else {
        "rd(ld_res(l) + rd(ld_o(l) * inv1 * ld_g1(l)))"
    };
    let store = if h_out {
        include_str!("wgsl/store_h.wgsl")
    } else {
        ""
    };
    // One pass of substitution, as `format!` did: no placeholder's value is read again.
    include_str!("wgsl/residual_prologue.wgsl")
        .replace("{eps}", &crate::gpu::wgsl_f32(eps))
        .replace("{h}", h)
        .replace("{store}", store)
}

/// The fused GEMV's norm prologue: the staged row times its inverse RMS and the scale
/// (`norm_prologue.wgsl`), `eps` the norm's epsilon.
pub(super) fn norm_prologue(eps: f32) -> String {
    include_str!("wgsl/norm_prologue.wgsl").replace("{eps}", &crate::gpu::wgsl_f32(eps))
}

/// The fused GEMV's loaders of the row (`xm`, `xe`, `xo`, `xeo` in `fused_gemv.wgsl`): from the
/// staged copy in workgroup memory (`staged`), else from memory (`k` the row length, `f16` the
/// activation type).
pub(super) struct XLoaders {
    pub(super) xm: &'static str,
    pub(super) xe: &'static str,
    pub(super) xo: &'static str,
    pub(super) xeo: &'static str,
}

pub(super) fn x_loaders(staged: bool, k: usize, f16: bool) -> XLoaders {
    XLoaders {
        xm: if staged {
            "return 0.0;"
        } else if k.is_multiple_of(8) {
            "return ld_x(k);"
        } else {
            "return select(0.0, ld_x(min(k, K - 1u)), k < K);"
        },
        xe: if staged {
            "return xs[2u * i];"
        } else {
            "let k = 8u * i; return vec4<f32>(xm(k), xm(k + 2u), xm(k + 4u), xm(k + 6u));"
        },
        xo: if staged {
            "return xs[2u * i + 1u];"
        } else {
            "let k = 8u * i + 1u; return vec4<f32>(xm(k), xm(k + 2u), xm(k + 4u), xm(k + 6u));"
        },
        xeo: if staged {
            "return mat2x4<f32>(xs[2u * i], xs[2u * i + 1u]);"
        } else if f16 && k.is_multiple_of(8) {
            // Four words hold the eight elements: each unpacked once for both halves.
            "let a = unpack2x16float(ldw_x(4u * i));
    let b = unpack2x16float(ldw_x(4u * i + 1u));
    let c = unpack2x16float(ldw_x(4u * i + 2u));
    let d = unpack2x16float(ldw_x(4u * i + 3u));
    return mat2x4<f32>(vec4<f32>(a.x, b.x, c.x, d.x), vec4<f32>(a.y, b.y, c.y, d.y));"
        } else {
            "return mat2x4<f32>(xe(i), xo(i));"
        },
    }
}

/// The loaders of weight `j`'s bits (`ldw_qw{j}`, with `wide` also `ldv_qw{j}`), scales
/// (`ld_sc{j}`) and zero points (`ldi_zp{j}`) when it is packed with the others in one binding
/// `wts`: gpu.rs's loaders of that binding, at the weight's offsets.
pub(super) fn packed_loaders(
    j: usize,
    q: &GpuTensor,
    s: &GpuTensor,
    z: Option<&GpuTensor>,
    wide: bool,
) -> String {
    let mut code = String::new();
    let sc = if s.dtype == DType::F16 {
        format!(
            "let k = i + {}u; return unpack2x16float(ldw_wts(k >> 1u))[k & 1u];",
            s.byte_offset() / 2
        )
    } else {
        format!(
            "return bitcast<f32>(ldw_wts(i + {}u));",
            s.byte_offset() / 4
        )
    };
    code.push_str(&format!(
        "fn ldw_qw{j}(w: u32) -> u32 {{ return ldw_wts(w + {}u); }}
fn ld_sc{j}(i: u32) -> f32 {{ {sc} }}
",
        q.byte_offset() / 4,
    ));
    if wide {
        code.push_str(&format!(
            "fn ldv_qw{j}(v: u32) -> vec4<u32> {{ return ldv_wts(v + {}u); }}\n",
            q.byte_offset() / 16,
        ));
    }
    if let Some(z) = z {
        code.push_str(&format!(
            "fn ldi_zp{j}(i: u32) -> i32 {{ let k = i + {}u; return i32((ldw_wts(k >> 2u) >> ((k & 3u) * 8u)) & 0xffu); }}\n",
            z.byte_offset()
        ));
    }
    code
}

/// The VALUE of the fused GEMV's scalar epilogues (softcap, scale), `None` unless their scalars
/// are host constants of the activation type `act`, one element of rank at most `rank` (and the
/// softcap's two the same).
pub(super) fn scalar_value(
    e: Epilogue,
    inputs: &[Option<&Value>],
    act: DType,
    rank: usize,
) -> Option<String> {
    let (d, m) = match e {
        Epilogue::Softcap { div, mul } => (div, mul),
        Epilogue::Scale { factor } => (factor, factor),
        _ => return None,
    };
    let scalar = |i: usize| match inputs.get(i).copied().flatten() {
        Some(Value::Host(h)) if h.dtype == act && h.numel() == 1 && h.shape.len() <= rank => {
            h.to_f32().first().copied()
        }
        _ => None,
    };
    let (Some(c), Some(c2)) = (scalar(d), scalar(m)) else {
        return None;
    };
    let c = crate::gpu::wgsl_f32(c);
    if matches!(e, Epilogue::Softcap { .. }) {
        if c != crate::gpu::wgsl_f32(c2) {
            return None;
        }
        // As the Div, Tanh (ew.wgsl's clamped tanh_) and Mul nodes.
        Some(format!("rd(rd(tanh_(rd(rd(a0) / {c}))) * {c})"))
    } else {
        Some(format!("rd(rd(a0) * {c})"))
    }
}
