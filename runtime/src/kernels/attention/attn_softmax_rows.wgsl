// Prompt attention on software adapters, pass 2 of 3 (ops/attention/regs.rs): the softmax of
// each row of the scores P [B * kvH, NR, T] (rows R0..R0 + NR) over the keys that row can see,
// in place (the
// other keys of the row are left as they are: the P·V pass does not read them). One invocation
// per row. Scores at NEG (or -inf, from a bias) weigh 0; a row whose keys all weigh 0 is left at 0.
// CAUSAL, PAST_B and the parameters (`AttnParams`): as attn_scores_regs.wgsl.
const CAUSAL: bool = {{CAUSAL}};

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let NEG = bitcast<f32>(0xff7fffffu);
    let B = prm.b;
    let S = prm.s;
    let H = prm.h;
    let KVH = prm.kv_heads;
    let T = prm.t;
    let window = prm.window;
    let G = H / KVH;
    let R0 = prm.row0;
    let NR = prm.rows;
    let row = (wid.x + wid.y * nwg.x) * WG + lid.x;
    if (row >= B * KVH * NR) {
        return;
    }
    let b = row / (KVH * NR);
    let s = (R0 + row % NR) / G;
    let pb = {{PAST_B}};
    var first = 0;
    var last = i32(T) - 1;
    if (CAUSAL) {
        last = min(pb + i32(s), last);
        if (window > 0) { first = max(0, pb + i32(s) - window + 1); }
    }
    let base = row * T;
    var m = NEG;
    for (var t = first; t <= last; t = t + 1) {
        m = max(m, ld_p(base + u32(t)));
    }
    var sum = 0.0;
    for (var t = first; t <= last; t = t + 1) {
        let sc = ld_p(base + u32(t));
        let e = select(0.0, exp(sc - m), sc > NEG);
        stf_p(base + u32(t), e);
        sum = sum + e;
    }
    let inv = select(0.0, 1.0 / sum, sum > 0.0);
    for (var t = first; t <= last; t = t + 1) {
        stf_p(base + u32(t), ld_p(base + u32(t)) * inv);
    }
}
