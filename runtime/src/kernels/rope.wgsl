// Rotary embedding on x viewed as logical [B, S, H, D] with arbitrary strides (also extracts heads
// from a packed QKV row). Output contiguous in [B, S, H, D] order, or [B, H, S, D] when HS_SWAP.
// prm: [n, B, S, H, D, sb, ss, sh, off, rot_dim, half]
fn rot_row(b: u32, s: u32) -> u32 {
    let S = prm[2];
    return {{COS_ROW}};
}

fn compute(i: u32) -> f32 {
    let S = prm[2];
    let H = prm[3];
    let D = prm[4];
    let d = i % D;
    var s = 0u;
    var h = 0u;
    if ({{HS_SWAP}}) {
        s = (i / D) % S;
        h = (i / (D * S)) % H;
    } else {
        h = (i / D) % H;
        s = (i / (D * H)) % S;
    }
    let b = i / (D * H * S);
    let base = prm[8] + b * prm[5] + s * prm[6] + h * prm[7];
    let rot = prm[9];
    if (!{{ROTARY}} || d >= rot) { return ld_x(base + d); }
    return rotate(base, d, rot, rot_row(b, s) * prm[10]);
}
