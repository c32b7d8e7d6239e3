// kv_append in place (appended to kv_append.wgsl instead of the element-mapped main): present
// is the past's own buffer, given up by its owner and with room for T rows (B = kvH = 1, so
// row t of present is row t of the buffer whatever T is). Only words from prm.first on are
// visited (the first row that may change: the new rows' start, when the host knows it); the
// past's rows that no new key replaces are left as they are, rows after the new ones zeroed, as
// in the copying form. f16: D is even, so a word's two elements share a row.
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = prm.first / EPW_y + gid.x + gid.y * nwg.x * 64u;
    let n = prm.n;
    let i0 = w * EPW_y;
    if (i0 >= n) { return; }
    let D = prm.d;
    let S = prm.s;
    let t = i32(i0 / D);
    let pb = ldi_seqlens(0u) + 1 - i32(S);
    if (t < i32(prm.past) && (t < pb || t >= pb + i32(S))) { return; }
    let a = elem(i0);
    var b = vec2<f32>(0.0, 0.0);
    if (EPW_y == 2u && i0 + 1u < n) { b = elem(i0 + 1u); }
    st_y(w, a.x, b.x);
    {{STORE_V}}
}
