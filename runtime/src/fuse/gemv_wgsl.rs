//! WGSL fragments of the fused GEMV's code.

use crate::exec::GpuTensor;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// The fused GEMV's per-column sum of its TPC lanes' partial sums (r0, r1 -> a0, a1): a tree in
/// workgroup memory ...
pub(super) const REDUCE_TREE: &str = "red[t] = r0;
        red1[t] = r1;
        workgroupBarrier();
        for (var s = TPC / 2u; s > 0u; s = s / 2u) {
            if (lane < s) {
                red[t] = red[t] + red[t + s];
                red1[t] = red1[t] + red1[t + s];
            }
            workgroupBarrier();
        }
        let a0 = red[t];
        let a1 = red1[t];";
/// ... or a butterfly of subgroup shuffles (the lanes are consecutive in one subgroup).
pub(super) const REDUCE_SHUFFLE: &str = "var a0 = r0;
        var a1 = r1;
        for (var s = TPC / 2u; s > 0u; s = s / 2u) {
            a0 = a0 + subgroupShuffleXor(a0, s);
            a1 = a1 + subgroupShuffleXor(a1, s);
        }";

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
