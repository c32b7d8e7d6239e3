// Rotary embedding on x viewed as logical [B, S, H, D] with arbitrary strides (also extracts heads
// from a packed QKV row). Output contiguous in [B, S, H, D] order, or [B, H, S, D] when HS_SWAP.
// Parameters: `RopeParams` (ops/attention/rotary.rs).
fn rot_row(b: u32, s: u32) -> u32 {
    let S = prm.s;
    return {{COS_ROW}};
}

fn compute(i: u32) -> f32 {
    let S = prm.s;
    let H = prm.h;
    let D = prm.d;
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
    let base = prm.off + b * prm.sb + s * prm.ss + h * prm.sh;
    let rot = prm.rot_dim;
    if (!{{ROTARY}} || d >= rot) { return ld_x(base + d); }
    return rotate(base, d, rot, rot_row(b, s) * prm.half);
}
