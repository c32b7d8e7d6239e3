// Per-layer lookups (fuse/layer_lookups.rs): L tables T_j [P, D] read at the same ids, each row
// times its scale s_j, into y [tokens, L, D] (the Concat of the unsqueezed lookups). One dispatch
// covers `count` tables from slot `first` (as many as the adapter lets one kernel bind): for each
// token the elements [first * D, (first + count) * D) of its row of L * D. Ids outside [-P, P)
// give 0 (the unfused Gather rejects them; a fused kernel cannot raise an error). Each
// invocation writes one word of y: D is even for f16 results, so a word never straddles two
// tables.
// Parameters: `LayerLookupsParams` (fuse/layer_lookups.rs).
fn compute(e: u32) -> f32 {
    let D = prm.row_len;
    let KD = prm.count * D;
    let t = e / KD;
    let r = e % KD;
    let j = r / D;
    let d = r % D;
    var p = ldi_ids(t);
    if (p < 0) { p = p + i32(prm.rows); }
    if (p < 0 || u32(p) >= prm.rows) { return 0.0; }
    let at = u32(p) * D + d;
    var v = 0.0;
    {{LOOKUP}}
    return v * prm_scales(j);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = gid.x + gid.y * nwg.x * {{WG}}u;
    let e0 = w * EPW_y;
    if (e0 >= prm.n) { return; }
    let v0 = compute(e0);
    var v1 = 0.0;
    if (EPW_y == 2u && e0 + 1u < prm.n) { v1 = compute(e0 + 1u); }
    let KD = prm.count * prm.row_len;
    let o = (e0 / KD) * prm.slots * prm.row_len + prm.first * prm.row_len + e0 % KD;
    st_y(o / EPW_y, v0, v1);
}
