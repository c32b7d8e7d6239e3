// OneHot: y viewed as [outer, depth, inner], indices as [outer, inner] (i32, or floats truncated
// toward zero; negative ones count from depth, any other outside [0, depth) matches nothing).
// Parameters: `OneHotParams` (ops/movement.rs).
fn compute(i: u32) -> f32 {
    let inner = prm.inner;
    let depth = prm.depth;
    let j = i % inner;
    let d = (i / inner) % depth;
    let o = i / (inner * depth);
    var q = ldi_idx(o * inner + j);
    if (q < 0) { q = q + i32(depth); }
    return select(prm.off, prm.on, q == i32(d));
}
