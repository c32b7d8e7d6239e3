// Fused GEMV for one row (M == 1), made by the fusion pass (src/fuse.rs):
//   prologue  x = [ (res + RMSNorm(o) * g1) * scalar ]  or  x = input row;
//             x = RMSNorm(x) * g2 (optional); the un-normalised x is stored once (workgroup 0)
//             when the graph needs it elsewhere (the residual stream);
//   GEMVs     y_j = x @ dequant(W_j)^T for up to three MatMulNBits weights sharing x
//             (4-bit blocks, w = (q - zp) * scale, low nibble first, as matmul_nbits.wgsl);
//             each weight's bits, scales and zero points are read through ldw_qwJ, ld_scJ and
//             ldi_zpJ: its own bindings, or its range of one packed buffer per kind
//             (a constant offset), as are several separate results (st_yJ);
//   epilogue  each y_j stored, or gelu_tanh(y_0) * y_1, or gelu_tanh(y_0) * other[off + n], or
//             c * tanh(y_0 / c) (softcap), or y_0 * s.
// Activations are f32, or f16 (stored packed, computed in f32 and rounded with rd() wherever the
// unfused graph stores an f16 value, so results match it up to f32 summation order).
// Every workgroup recomputes the prologue into workgroup memory (K floats; cheap next to the
// weights it reads) and then computes REPS x COLS output columns, TPC threads per column (8 on
// GPUs, 1 on software adapters: src/fuse.rs, Limits::gemv_tpc); f32
// throughout. An invocation computes its REPS columns (COLS apart) together, each load of the
// staged row serving all of them (the DOTS functions return REPS partial sums).
// The row is held by weight word: for the 8 elements k0..k0+8 of word i, `xe(i)` holds the even
// ones and `xo(i)` the odd ones, so that the low and high nibbles of the word's four bytes, taken
// as two vec4 at once, meet them in two dot products. The row's sum over each quant block (the
// zero point's term) is computed once per workgroup into `bsum`.
// A dispatch computes columns prm.first_col..prm.end_col (a lone weight split by rows across
// buffers is bound one part at a time, its rows starting at column prm.first_col; otherwise
// 0..NV). Parameters: `FusedGemvParams` (src/fuse/gemv_wgsl.rs).
var<workgroup> xs: array<vec4<f32>, {{XS_LEN}}>;
var<workgroup> bsum: array<f32, {{NB}}>;
var<workgroup> red1: array<f32, {{WG}}>;
var<workgroup> vals: array<f32, COLS>;

const K: u32 = {{K}};
const NB: u32 = {{NB}};
const BLOCK: u32 = {{BLOCK}};
const BLOB_WORDS: u32 = BLOCK / 8u;
const ZROW: u32 = {{ZROW}};
const NV: u32 = {{NV}};
const TPC: u32 = {{TPC}};
const COLS: u32 = WG / TPC;
// Column groups of COLS per workgroup (amortising the prologue), computed together.
const REPS: u32 = {{REPS}};
// Elements per output word: 2 when activations are f16 (even columns store pairs).
const EPW: u32 = {{EPW}};

// Rounds to the activation type (f16 graphs round after every op; f32: identity).
fn rd(x: f32) -> f32 {
    {{RD}}
}

fn tanh_(x: f32) -> f32 {
    return tanh(clamp(x, -15.0, 15.0));
}

fn gelu_tanh(x: f32) -> f32 {
    return 0.5 * x * (1.0 + tanh_(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// Element k of the staged row (word k / 8: even elements in xs[2w], odd ones in xs[2w + 1]).
fn xs_set(k: u32, v: f32) {
    xs[2u * (k >> 3u) + (k & 1u)][(k >> 1u) & 3u] = v;
}
fn xs_get(k: u32) -> f32 {
    return xs[2u * (k >> 3u) + (k & 1u)][(k >> 1u) & 3u];
}

// Element k of the input row read from memory (no prologue and a row too large to stage);
// zero past K.
fn xm(k: u32) -> f32 {
    {{XM}}
}

// The even and odd elements of weight word i: staged in `xs` by the prologue, or read from memory.
fn xe(i: u32) -> vec4<f32> {
    {{XE}}
}
fn xo(i: u32) -> vec4<f32> {
    {{XO}}
}
// Both at once (columns 0 and 1), from one read of the word's elements.
fn xeo(i: u32) -> mat2x4<f32> {
    {{XEO}}
}

{{NIBBLES}}

{{DOTS}}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>{{SG}}) {
    {{SG_INIT}}
    let flat = wid.x + wid.y * nwg.x;
    let v0 = prm.first_col;
    let v_end = prm.end_col;
    if (v0 + flat * COLS * REPS >= v_end) { return; }
    let t = lid.x;
    let scalar = prm.scalar;
    let other_off = prm.other_off;
    {{PROLOGUE}}
    workgroupBarrier();
    for (var b = t; b < NB; b = b + WG) {
        var s = vec4<f32>(0.0);
        for (var w = 0u; w < BLOB_WORDS; w = w + 1u) {
            let i = b * BLOB_WORDS + w;
            s = s + xe(i) + xo(i);
        }
        bsum[b] = dot(s, vec4<f32>(1.0));
    }
    workgroupBarrier();
    // Column c, lane: the invocation's index in the workgroup, or (when the TPC lanes add up
    // through subgroup shuffles) its index in subgroup order, so that a column's lanes are
    // consecutive invocations of one subgroup.
    let tt = {{ORDER}};
    let c = tt / TPC;
    let lane = tt % TPC;
    // This invocation's columns: base + rep * COLS.
    let base = v0 + flat * REPS * COLS + c;
    var p0: array<f32, REPS>;
    var p1: array<f32, REPS>;
    if (base < v_end) {
        let v = base;
        {{COMPUTE}}
    }
    for (var rep = 0u; rep < REPS; rep = rep + 1u) {
        let v = base + rep * COLS;
        var r0 = 0.0;
        var r1 = 0.0;
        if (v < v_end) {
            r0 = p0[rep];
            r1 = p1[rep];
        }
        // The column's sums a0, a1 (for lane 0).
        {{REDUCE}}
        if (lane == 0u && v < v_end) {
            vals[c] = {{VALUE}};
        }
        workgroupBarrier();
        if (lane == 0u && v < v_end && c % EPW == 0u) {
            let x0 = vals[c];
            let x1 = vals[min(c + 1u, COLS - 1u)];
            {{STORE}}
        }
        workgroupBarrier();
    }
}
