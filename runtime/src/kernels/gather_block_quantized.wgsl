// GatherBlockQuantized (gather_axis 0, quantize_axis last): rows of a block-quantised matrix
// [rows, K] (uint8 data, BITS per value, low bits first) dequantised to y[idx..., K].
// prm: [n, K, rows, n_blocks, data_row_bytes, zp_row_bytes]
const BITS: u32 = {{BITS}};
const BLOCK: u32 = {{BLOCK}};

fn zero_point(row: u32, b: u32, nb: u32, zrow: u32) -> f32 {
    {{ZP}}
}

fn compute(i: u32) -> f32 {
    let K = prm[1];
    let rows = prm[2];
    let nb = prm[3];
    let drow = prm[4];
    let zrow = prm[5];
    let q = i / K;
    let c = i % K;
    var r = ldi_idx(q);
    if (r < 0) { r = r + i32(rows); }
    if (r < 0 || u32(r) >= rows) { return 0.0; }
    let row = u32(r);
    var v = 0u;
    if (BITS == 4u) {
        let byte = u32(ldi_data(row * drow + c / 2u));
        v = (byte >> ((c & 1u) * 4u)) & 15u;
    } else {
        v = u32(ldi_data(row * drow + c));
    }
    let b = c / BLOCK;
    return (f32(v) - zero_point(row, b, nb, zrow)) * ld_scales(row * nb + b);
}
