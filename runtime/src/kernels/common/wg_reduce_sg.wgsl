// Workgroup reductions with subgroup operations (the device has them: Gpu::subgroups), the
// same functions as wg_reduce.wgsl: every invocation t of the workgroup passes its value and
// gets the sum (or max) of all of them. Each subgroup reduces in registers, its first
// invocation stores the result, and every invocation then combines the num_subgroups results
// in the same order. That is two barriers a call instead of 2 + log2(WG), and correct for any
// subgroup size and any mapping of invocations to subgroups. main sets sg_id, sg_n, sg_lane
// and sg_size from its built-ins first. `red` keeps a slot per invocation for the kernels that also use it
// directly (fused_gemv.wgsl).
var<workgroup> red: array<f32, {{WG}}>;
var<private> sg_id: u32;
var<private> sg_n: u32;
var<private> sg_lane: u32;
var<private> sg_size: u32;

fn wg_sum(t: u32, v: f32) -> f32 {
    let s = subgroupAdd(v);
    if (sg_lane == 0u) { red[sg_id] = s; }
    workgroupBarrier();
    var r = red[0];
    for (var i = 1u; i < sg_n; i = i + 1u) { r = r + red[i]; }
    workgroupBarrier();
    return r;
}

fn wg_max(t: u32, v: f32) -> f32 {
    let s = subgroupMax(v);
    if (sg_lane == 0u) { red[sg_id] = s; }
    workgroupBarrier();
    var r = red[0];
    for (var i = 1u; i < sg_n; i = i + 1u) { r = max(r, red[i]); }
    workgroupBarrier();
    return r;
}
