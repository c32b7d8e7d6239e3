// Gather along an axis. data viewed as [outer, dim, inner], indices flat [nidx] (i32, may be negative).
// y: [outer, nidx, inner]. Parameters: `GatherParams` (ops/movement.rs).
fn compute(i: u32) -> f32 {
    let inner = prm.inner;
    let nidx = prm.nidx;
    let dim = prm.dim;
    let blk = nidx * inner;
    let o = i / blk;
    let r = i % blk;
    let q = r / inner;
    let j = r % inner;
    var ix = ldi_idx(q);
    if (ix < 0) { ix = ix + i32(dim); }
    if (ix < 0 || u32(ix) >= dim) { return 0.0; }
    return ld_data((o * dim + u32(ix)) * inner + j);
}
