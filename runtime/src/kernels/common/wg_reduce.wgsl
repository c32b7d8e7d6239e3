// Workgroup reductions shared by the row kernels (appended to their bodies by
// Kernel::wg_reduce; wg_reduce_sg.wgsl when the device has subgroup operations): every
// invocation t of the workgroup passes its value and gets the sum (or max) of all of them.
// Each call ends with a barrier, so the scratch `red` can be reused at once.
var<workgroup> red: array<f32, {{WG}}>;

fn wg_sum(t: u32, v: f32) -> f32 {
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

fn wg_max(t: u32, v: f32) -> f32 {
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

