
// Rotary rotation of element d (< rot, the rotary dim) of the row of `x` starting at `base`;
// `row` = position * half is where the position's cos/sin start. Shared by rope.wgsl and
// kv_append.wgsl (appended to both bodies), so both rotate with the same arithmetic.
fn rotate(base: u32, d: u32, rot: u32, row: u32) -> f32 {
    let x = ld_x(base + d);
    if ({{INTERLEAVED}}) {
        let j = d / 2u;
        let c = ld_cos(row + j);
        let sn = ld_sin(row + j);
        if ((d & 1u) == 0u) { return x * c - ld_x(base + d + 1u) * sn; }
        return x * c + ld_x(base + d - 1u) * sn;
    }
    let hr = rot / 2u;
    if (d < hr) {
        return x * ld_cos(row + d) - ld_x(base + d + hr) * ld_sin(row + d);
    }
    return x * ld_cos(row + d - hr) + ld_x(base + d - hr) * ld_sin(row + d - hr);
}
