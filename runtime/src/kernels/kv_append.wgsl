// present[b, h, t, d] = past[b, h, t, d] for t < past_b; the new key/value for past_b <= t <
// past_b + S, read straight from its source view (logical [B, S, kvH, D] with strides
// (sb, ss, sh) and offset, so heads are also taken from a packed QKV row) and, for keys, rotated
// here (position past_b + s, the same arithmetic as rope.wgsl); past (if within the past buffer)
// or 0 after that. One dispatch instead of rotate/copy + append.
// past_b = seqlens_k[b] + 1 - S. prm: [n, kvH, T, D, S, P, sb, ss, sh, off, rot_dim, half]
fn new_value(b: u32, s: u32, h: u32, d: u32, pos: u32) -> f32 {
    let base = prm[9] + b * prm[6] + s * prm[7] + h * prm[8];
    let x = ld_src(base + d);
    let rot = prm[10];
    if (!{{ROTARY}} || d >= rot) { return x; }
    let half = prm[11];
    let row = pos * half;
    if ({{INTERLEAVED}}) {
        let j = d / 2u;
        let c = ld_cos(row + j);
        let sn = ld_sin(row + j);
        if ((d & 1u) == 0u) { return x * c - ld_src(base + d + 1u) * sn; }
        return x * c + ld_src(base + d - 1u) * sn;
    }
    let hr = rot / 2u;
    if (d < hr) {
        return x * ld_cos(row + d) - ld_src(base + d + hr) * ld_sin(row + d);
    }
    return x * ld_cos(row + d - hr) + ld_src(base + d - hr) * ld_sin(row + d - hr);
}

fn compute(i: u32) -> f32 {
    let H = prm[1];
    let T = prm[2];
    let D = prm[3];
    let S = prm[4];
    let P = prm[5];
    let d = i % D;
    let t = (i / D) % T;
    let h = (i / (D * T)) % H;
    let b = i / (D * T * H);
    let pb = ldi_seqlens(b) + 1 - i32(S);
    let ti = i32(t);
    if (ti >= pb && ti < pb + i32(S)) {
        let s = u32(ti - pb);
        return new_value(b, s, h, d, t);
    }
    if (t < P) {
        return {{PAST}};
    }
    return 0.0;
}
