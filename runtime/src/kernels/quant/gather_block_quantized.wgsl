// GatherBlockQuantized (gather_axis 0, quantize_axis last): rows of a block-quantised matrix
// [rows, K] (uint8 data, BITS per value, low bits first) dequantised to y[idx..., K].
// A dispatch writes the rows [lo, hi) only (others are skipped): the data, scales and zero
// points bound may each be one row range of a split table, starting at rows data_row0,
// scales_row0 and zp_row0.
// Parameters: `GbqParams` (ops/quant.rs).
const BITS: u32 = {{BITS}};
const BLOCK: u32 = {{BLOCK}};

fn zero_point(row: u32, b: u32, nb: u32, zrow: u32) -> f32 {
    {{ZP}}
}

fn row_of(i: u32) -> i32 {
    var r = ldi_idx(i / prm.k);
    if (r < 0) { r = r + i32(prm.rows); }
    return r;
}

fn compute(i: u32) -> f32 {
    let K = prm.k;
    let rows = prm.rows;
    let nb = prm.blocks;
    let drow = prm.data_row;
    let zrow = prm.zp_row;
    let c = i % K;
    let r = row_of(i);
    if (r < 0 || u32(r) >= rows) { return 0.0; }
    let row = u32(r);
    let local = row - prm.data_row0;
    let srow = row - prm.scales_row0;
    let zrow_l = row - prm.zp_row0;
    var v = 0u;
    if (BITS == 4u) {
        let byte = u32(ldi_data(local * drow + c / 2u));
        v = (byte >> ((c & 1u) * 4u)) & 15u;
    } else {
        v = u32(ldi_data(local * drow + c));
    }
    let b = c / BLOCK;
    return (f32(v) - zero_point(zrow_l, b, nb, zrow)) * ld_scales(srow * nb + b);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = gid.x + gid.y * nwg.x * {{WG}}u;
    let n = prm.n;
    let i0 = w * EPW_y;
    if (i0 >= n) { return; }
    // Words never straddle rows (K is even when two values share a word), so test the first.
    let r = row_of(i0);
    if (r >= 0 && u32(r) < prm.rows && (u32(r) < prm.lo || u32(r) >= prm.hi)) { return; }
    let v0 = compute(i0);
    var v1 = 0.0;
    if (EPW_y == 2u && i0 + 1u < n) { v1 = compute(i0 + 1u); }
    st_y(w, v0, v1);
}
