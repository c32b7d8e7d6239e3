// Gather (axis 0) of a 2-D table times a scalar (fuse/gather_scale.rs): y[i] = data[idx[i / H],
// i % H] * s, the row 0 for indices outside [-P, P) (as Gather gives) times s.
// Parameters: `GatherScaleParams` (fuse/gather_scale.rs).
fn compute(i: u32) -> f32 {
    let H = prm.row_len;
    let P = prm.rows;
    var p = ldi_idx(i / H);
    if (p < 0) { p = p + i32(P); }
    var v = 0.0;
    if (p >= 0 && u32(p) < P) { v = ld_data(u32(p) * H + i % H); }
    return v * ld_s(0u);
}
