// Grouped-query attention for one (b, h, s) query per workgroup. q: [B, S, H, D] (rotated);
// k, v: [B, kvH, T, D] (present). Scores go to a scratch row, then softmax, then P·V.
// Keys visible to query s: t in [start, past_b + s], start = past_b + s - window + 1 (window > 0).
// prm: [B, S, H, kvH, D, T, window(i32), bias_sb, bias_sh, bias_ss, bias_st]
var<workgroup> red: array<f32, {{WG}}>;

fn wg_reduce_max(t: u32, v: f32) -> f32 {
    red[t] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (t < s) { red[t] = max(red[t], red[t + s]); }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn wg_reduce_sum(t: u32, v: f32) -> f32 {
    red[t] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (t < s) { red[t] = red[t] + red[t + s]; }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let B = prm[0];
    let S = prm[1];
    let H = prm[2];
    let KVH = prm[3];
    let D = prm[4];
    let T = prm[5];
    let window = bitcast<i32>(prm[6]);
    let flat = wid.x + wid.y * nwg.x;
    if (flat >= B * H * S) { return; }
    let s = flat % S;
    let h = (flat / S) % H;
    let b = flat / (S * H);
    let kvh = h / (H / KVH);
    let tid = lid.x;
    let pb = ldi_seqlens(b) + 1 - i32(S);
    let last = pb + i32(s);
    var first = 0;
    if (window > 0) { first = max(0, last - window + 1); }
    let qbase = ((b * S + s) * H + h) * D;
    let kvbase = (b * KVH + kvh) * T * D;
    let srow = flat * T;
    var m = -3.4028234e38;
    for (var t = first + i32(tid); t <= last; t = t + i32(WG)) {
        let tt = u32(t);
        var acc = 0.0;
        for (var d = 0u; d < D; d = d + 1u) {
            acc = acc + ld_q(qbase + d) * ld_k(kvbase + tt * D + d);
        }
        var sc = acc * {{SCALE}};
        {{SOFTCAP}}
        {{BIAS}}
        stf_scores(srow + tt, sc);
        m = max(m, sc);
    }
    m = wg_reduce_max(tid, m);
    var sum = 0.0;
    for (var t = first + i32(tid); t <= last; t = t + i32(WG)) {
        let tt = u32(t);
        let p = exp(ld_scores(srow + tt) - m);
        stf_scores(srow + tt, p);
        sum = sum + p;
    }
    sum = wg_reduce_sum(tid, sum);
    storageBarrier();
    workgroupBarrier();
    for (var d = tid; d < D; d = d + WG) {
        var acc = 0.0;
        for (var t = first; t <= last; t = t + 1) {
            let tt = u32(t);
            acc = acc + ld_scores(srow + tt) * ld_v(kvbase + tt * D + d);
        }
        stf_y(((b * S + s) * H + h) * D + d, acc / sum);
    }
}
