// The 2-D rotary of the vision encoder (fuse/rotary_2d.rs): x [B, S, H, D] as two parts of
// D / 2, part p rotated by halves with its own per-token tables (c0/s0 for the first part, c1/s1
// for the second, [B|1, S|1, 1, D / 2] read at `c_off + b * c_sb + s * c_ss + j`):
// y = x * cos + Concat(-x[half:], x[:half]) * sin within each part. Parameters: `Rotary2dParams`.
fn compute(i: u32) -> f32 {
    let D = prm.d;
    let half = D / 2u;
    let hr = half / 2u;
    let d = i % D;
    let row = i / D;
    let bs = row / prm.h;
    let s = bs % prm.s;
    let b = bs / prm.s;
    let p = d / half;
    let j = d % half;
    let base = row * D + p * half;
    var r = 0.0;
    if (j < hr) { r = -ld_x(base + j + hr); } else { r = ld_x(base + j - hr); }
    let c = prm.c_off + b * prm.c_sb + s * prm.c_ss + j;
    var cs = 0.0;
    var sn = 0.0;
    if (p == 0u) {
        cs = ld_c0(c);
        sn = ld_s0(c);
    } else {
        cs = ld_c1(c);
        sn = ld_s1(c);
    }
    return rd(rd(ld_x(i) * cs) + rd(r * sn));
}

// Rounds to the activation type (f16: as the unfused Mul and Add nodes store; f32: identity).
fn rd(x: f32) -> f32 {
    {{RD}}
}
