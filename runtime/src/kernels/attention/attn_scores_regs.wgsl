// Prompt attention on software adapters, pass 1 of 3 (ops/attention/regs.rs): the scores
// P[bk, r - R0, t] = SCALE * dot(Q[row r], K[t]) (then softcap, then the additive bias) for the
// rows r = s * G + g in [R0, R0 + NR) of kv head bk = b * kvH + kvh, into an f32 scratch
// [B * kvH, NR, T] (long prompts take their rows in chunks: R0 = prm.row0, NR = prm.rows).
// Each invocation computes an R x C block (rows r0 + i, keys t0 + j) straight from storage,
// without workgroup memory: CPU adapters (SwiftShader, lavapipe) run an invocation's loads as
// per-lane gathers, so this loads each query element once for C keys and each key word (two
// dimensions) once for R rows. The block is unrolled (DECL, STEP, STORE, generated: distinct
// variables, no private arrays). Blocks no row can see are skipped; keys a row cannot see are
// written as NEG (the softmax pass reads only each row's visible keys).
// Queries: the plain [B, S, H, D] view of `x` (Q_FN: q_base); k: [B, kvH, T, D], D even.
// CAUSAL: keys visible to query s: t in [first, last], last = past_b + s (PAST_B, from
// seqlens_k), first = max(0, last - window + 1) when window > 0, else 0. Not CAUSAL: all T.
// Parameters: as gqa.wgsl's (`AttnParams`, ops/attention/flash.rs).
const R: u32 = {{R}};
const C: u32 = {{C}};
const CAUSAL: bool = {{CAUSAL}};

{{Q_FN}}

// The scaled, softcapped and biased score of row (s, head kvh * G + g) against key tt.
fn finish(qk: f32, b: u32, kvh: u32, g: u32, s: u32, tt: u32) -> f32 {
    let G = prm.h / prm.kv_heads;
    let h = kvh * G + g;
    var sc = qk * {{SCALE}};
    {{SOFTCAP}}
    {{BIAS}}
    return sc;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let NEG = bitcast<f32>(0xff7fffffu); // -f32::MAX
    let B = prm.b;
    let S = prm.s;
    let H = prm.h;
    let KVH = prm.kv_heads;
    let D = prm.d;
    let T = prm.t;
    let window = prm.window;
    let G = H / KVH;
    let R0 = prm.row0;
    let NR = prm.rows;
    let RE = R0 + NR; // one past the chunk's last row
    let idx = (wid.x + wid.y * nwg.x) * WG + lid.x;
    // Row blocks vary fastest: neighbouring invocations share their keys.
    let nrb = (NR + R - 1u) / R;
    let nkb = (T + C - 1u) / C;
    let rb = idx % nrb;
    let kb = (idx / nrb) % nkb;
    let bk = idx / (nrb * nkb);
    if (bk >= B * KVH) {
        return;
    }
    let b = bk / KVH;
    let kvh = bk % KVH;
    let r0 = R0 + rb * R;
    let t0 = kb * C;
    let pb = {{PAST_B}};
    if (CAUSAL) {
        // Past the last row's last key, or before the first row's first key: nothing to do.
        if (i32(t0) > pb + i32((min(r0 + R, RE) - 1u) / G)) {
            return;
        }
        if (window > 0 && i32(t0 + C) - 1 < pb + i32(r0 / G) - window + 1) {
            return;
        }
    }
    let kvbase = bk * T * D;
    {{DECL}}
    for (var d = 0u; d < D; d = d + 2u) {
        {{STEP}}
    }
    {{STORE}}
}
