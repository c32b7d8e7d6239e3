// Present K/V (or a head-major copy of Q) for attention: y[b, h, t, d] ([B, H, T, D]) is
// past[b, h, t, d] for t < P and x[off + b*sb + h*sh + (t - P)*st + d] (+ bias[boff + h*D + d])
// after it.
// Parameters: `SdpaKvParams` (ops/attention/sdpa.rs): H = heads, T = len, D = dim, P = past.
fn compute(i: u32) -> f32 {
    let H = prm.heads;
    let T = prm.len;
    let D = prm.dim;
    let P = prm.past;
    let d = i % D;
    let t = (i / D) % T;
    let bh = i / (D * T);
    let h = bh % H;
    let b = bh / H;
    if (t < P) { return {{PAST}}; }
    return ld_x(prm.off + b * prm.sb + h * prm.sh + (t - P) * prm.st + d){{BIAS}};
}
