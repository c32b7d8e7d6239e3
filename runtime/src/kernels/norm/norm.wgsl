// Layer / RMS normalisation over rows of length L, optionally with a residual (skip) and bias added
// first. One workgroup per row. Parameters: `NormParams` (ops/norm.rs).
// SCALE: `* ld_gamma(l % prm.gamma_len)` (the scale cyclic over the row), `* ld_gamma(i)` (one per
// element) or nothing (a norm without scale). STORE: the last pass, writing y (and the sum x + skip
// when asked) one element per step in f32, or two (one word) per step in f16 (rows of even length).

fn xin(i: u32, l: u32) -> f32 {
    return {{LOAD_X}};
}

// The normalised element i (column l) of a row with statistics mean and inv.
fn yout(i: u32, l: u32, x: f32, mean: f32, inv: f32) -> f32 {
    return (x - mean) * inv {{SCALE}} {{BETA}};
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>{{SG}}) {
    {{SG_INIT}}
    let row = wid.x + wid.y * nwg.x;
    if (row >= prm.rows) { return; }
    let L = prm.len;
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
    {{STORE}}
    if (t == 0u) {
        {{STORE_STATS}}
    }
}
