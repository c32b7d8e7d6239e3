// Rotary tables (fuse/rotary_table.rs): y_k[i] = c_k[pos[i / W], (i % W) % H], W = 2H — the
// half-width cache row twice (Gather + Concat(x, x)) — or W = H (a plain Gather of the row), for
// one or two caches c_k [P, H] read at the same positions; 0 for positions outside [-P, P), as
// Gather gives.
// Parameters: `RotaryTableParams` (fuse/rotary_table.rs).
fn idx(i: u32) -> i32 {
    let H = prm.cache_width;
    let P = prm.cache_rows;
    let W = prm.width;
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

// The element-mapped main: `compute` (one table) or `compute2` (two: c0 -> y0, c1 -> y1).
fn compute(i: u32) -> f32 { return v0(i); }
{{V1}}
