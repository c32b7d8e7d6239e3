// Flash-decoding combine for gqa.wgsl with chunks > 1: one workgroup per row (b, kvh, r), r =
// s * G + g; part[(row * chunks + c) * (D + 2) + {0: max, 1: sum, 2 + d: unnormalised acc}].
// y[b, s, h, d] = sum_c acc_c[d] * exp(m_c - m) / sum_c l_c * exp(m_c - m), m = max_c m_c.
// Parameters: `CombineParams` (ops/attention/flash.rs).
@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let B = prm.b;
    let S = prm.s;
    let H = prm.h;
    let KVH = prm.kv_heads;
    let D = prm.d;
    let CH = prm.chunks;
    let flat = wid.x + wid.y * nwg.x;
    if (flat >= B * H * S) { return; }
    let G = H / KVH;
    let SG = S * G;
    let bk = flat / SG;
    let row = flat % SG;
    let b = bk / KVH;
    let kvh = bk % KVH;
    let s = row / G;
    let h = kvh * G + row % G;
    let W = D + 2u;
    let base = flat * CH;
    var m = bitcast<f32>(0xff7fffffu);
    for (var c = 0u; c < CH; c = c + 1u) {
        m = max(m, ld_part((base + c) * W));
    }
    var l = 0.0;
    for (var c = 0u; c < CH; c = c + 1u) {
        l = l + ld_part((base + c) * W + 1u) * exp(ld_part((base + c) * W) - m);
    }
    let inv = select(0.0, 1.0 / l, l > 0.0);
    let ybase = ((b * S + s) * H + h) * D;
    // Dimension pairs, so an f16 y (D even) is written a whole word at a time.
    for (var d = 2u * lid.x; d < D; d = d + 2u * WG) {
        var a0 = 0.0;
        var a1 = 0.0;
        for (var c = 0u; c < CH; c = c + 1u) {
            let o = (base + c) * W;
            let e = exp(ld_part(o) - m);
            a0 = a0 + ld_part(o + 2u + d) * e;
            if (d + 1u < D) { a1 = a1 + ld_part(o + 3u + d) * e; }
        }
        if (EPW_y == 2u) {
            st_y((ybase + d) / 2u, a0 * inv, a1 * inv);
        } else {
            st_y(ybase + d, a0 * inv, 0.0);
            if (d + 1u < D) { st_y(ybase + d + 1u, a1 * inv, 0.0); }
        }
    }
}
