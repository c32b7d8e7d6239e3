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
    let x = ld_x(base + d);
    let rot = prm[9];
    if (!{{ROTARY}} || d >= rot) { return x; }
    let half = prm[10];
    let row = rot_row(b, s) * half;
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
