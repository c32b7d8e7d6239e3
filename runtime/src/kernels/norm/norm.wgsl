// Layer / RMS normalisation over rows of length L, optionally with a residual (skip) and bias added
// first. One workgroup per row. Parameters: `NormParams` (ops/norm.rs).
// SCALE: `* ld_gamma(l % gl)` (the scale cyclic over the row), `* ld_gamma(base + l)` (one per
// element) or nothing (a norm without scale).

fn xin(i: u32, l: u32) -> f32 {
    return {{LOAD_X}};
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>{{SG}}) {
    {{SG_INIT}}
    let row = wid.x + wid.y * nwg.x;
    if (row >= prm.rows) { return; }
    let L = prm.len;
    let gl = prm.gamma_len;
    let bl = prm.beta_len;
    let base = row * L;
    let t = lid.x;
    var mean = 0.0;
    if (!{{SIMPLE}}) {
        var s = 0.0;
        for (var l = t; l < L; l = l + WG) { s = s + xin(base + l, l); }
        mean = wg_sum(t, s) / f32(L);
    }
    var s2 = 0.0;
    for (var l = t; l < L; l = l + WG) {
        let v = xin(base + l, l);
        {{STORE_SUM}}
        let d = v - mean;
        s2 = s2 + d * d;
    }
    let inv = inverseSqrt(wg_sum(t, s2) / f32(L) + {{EPS}});
    for (var l = t; l < L; l = l + WG) {
        let v = (xin(base + l, l) - mean) * inv {{SCALE}};
        stf_y(base + l, v {{BETA}});
    }
    if (t == 0u) {
        {{STORE_STATS}}
    }
}
