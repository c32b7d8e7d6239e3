// Softmax (or log-softmax) over rows of length L: element (o, l, j) at (o * L + l) * inner + j.
// One workgroup per row (o, j). Parameters: `SoftmaxParams` (ops/reduce.rs).
var<workgroup> red: array<f32, {{WG}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= prm.rows) { return; }
    let L = prm.len;
    let inner = prm.inner;
    let o = row / inner;
    let j = row % inner;
    let base = o * L * inner + j;
    let t = lid.x;
    var m = bitcast<f32>(0xff7fffffu); // -f32::MAX
    for (var l = t; l < L; l = l + WG) { m = max(m, ld_x(base + l * inner)); }
    red[t] = m;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (t < s) { red[t] = max(red[t], red[t + s]); }
        workgroupBarrier();
    }
    m = red[0];
    workgroupBarrier();
    var sum = 0.0;
    for (var l = t; l < L; l = l + WG) { sum = sum + exp(ld_x(base + l * inner) - m); }
    red[t] = sum;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (t < s) { red[t] = red[t] + red[t + s]; }
        workgroupBarrier();
    }
    sum = red[0];
    for (var l = t; l < L; l = l + WG) {
        let v = ld_x(base + l * inner) - m;
        stf_y(base + l * inner, {{OUT}});
    }
}
