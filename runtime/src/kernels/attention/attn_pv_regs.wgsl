// Prompt attention on software adapters, pass 3 of 3 (ops/attention/regs.rs):
// y[b, s, h, d] = sum over the keys t that row r = s * G + g can see of P[bk, r - R0, t] * V[bk, t, d]
// for the chunk's rows r in [R0, R0 + NR) (P: the softmax pass's probabilities; v: [B, kvH, T, D],
// D even).
// Each invocation computes an R x C block (rows r0 + i, dimensions d0 + c) straight from
// storage, like attn_scores_regs.wgsl: per key it loads R probabilities (keys a row cannot see
// read as 0 through `select`, whatever the scratch holds there) and C / 2 words of V, then does
// R x C multiply-adds. The block is unrolled (DECL, STEP, STORE, generated). The keys walked are
// those of the block's rows together; a row with no visible key gets 0.
// y: f32, or f16 written a word (two dimensions) at a time. CAUSAL, PAST_B, parameters: as pass 1.
const R: u32 = {{R}};
const C: u32 = {{C}};
const CAUSAL: bool = {{CAUSAL}};

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
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
    let RE = R0 + NR;
    let idx = (wid.x + wid.y * nwg.x) * WG + lid.x;
    let nrb = (NR + R - 1u) / R;
    let ndb = (D + C - 1u) / C;
    let rb = idx % nrb;
    let db = (idx / nrb) % ndb;
    let bk = idx / (nrb * ndb);
    if (bk >= B * KVH) {
        return;
    }
    let b = bk / KVH;
    let kvh = bk % KVH;
    let r0 = R0 + rb * R;
    let d0 = db * C;
    let pb = {{PAST_B}};
    var kf = 0;
    var kl = i32(T) - 1;
    if (CAUSAL) {
        kl = min(pb + i32((min(r0 + R, RE) - 1u) / G), kl);
        if (window > 0) { kf = max(0, pb + i32(r0 / G) - window + 1); }
    }
    let vbase = bk * T * D;
    {{DECL}}
    for (var t = kf; t <= kl; t = t + 1) {
        let vrow = vbase + u32(t) * D;
        {{STEP}}
    }
    {{STORE}}
}
