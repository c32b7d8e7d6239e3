// Present K/V (or a head-major copy of Q) for attention: y[b, h, t, d] ([B, H, T, D]) is
// past[b, h, t, d] for t < P and x[off + b*sb + h*sh + (t - P)*st + d] (+ bias[boff + h*D + d])
// after it.
// prm: [0]n [1]H [2]T [3]D [4]P [5]sb [6]sh [7]st [8]off [9]boff
fn compute(i: u32) -> f32 {
    let H = prm[1];
    let T = prm[2];
    let D = prm[3];
    let P = prm[4];
    let d = i % D;
    let t = (i / D) % T;
    let bh = i / (D * T);
    let h = bh % H;
    let b = bh / H;
    if (t < P) { return {{PAST}}; }
    return ld_x(prm[8] + b * prm[5] + h * prm[6] + (t - P) * prm[7] + d){{BIAS}};
}
