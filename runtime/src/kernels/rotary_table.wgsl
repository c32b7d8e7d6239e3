// Rotary tables (fuse/rotary_table.rs): y_k[i] = c_k[pos[i / W], (i % W) % H], W = 2H — the
// half-width cache row twice (Gather + Concat(x, x)) — for one or two caches c_k [P, H] read at
// the same positions; 0 for positions outside [-P, P), as Gather gives.
// prm: [n, H, P]
fn idx(i: u32) -> i32 {
    let H = prm[1];
    let P = prm[2];
    let W = 2u * H;
    var p = ldi_pos(i / W);
    if (p < 0) { p = p + i32(P); }
    if (p < 0 || u32(p) >= P) { return -1; }
    return p * i32(H) + i32((i % W) % H);
}

fn v0(i: u32) -> f32 {
    let j = idx(i);
    if (j < 0) { return 0.0; }
    return ld_c0(u32(j));
}

{{V1}}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = gid.x + gid.y * nwg.x * WG;
    let n = prm[0];
    let i0 = w * EPW_y0;
    if (i0 >= n) { return; }
    let i1 = min(i0 + 1u, n - 1u);
    st_y0(w, v0(i0), v0(i1));
    {{SECOND}}
}
