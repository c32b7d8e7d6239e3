// present[b, h, t, d] = past[b, h, t, d] for t < past_b; new (already rotated, [B, S, kvH, D]) for
// past_b <= t < past_b + S; past (if within the past buffer) or 0 after that.
// past_b = seqlens_k[b] + 1 - S. prm: [n, kvH, T, D, S, P]
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
        return ld_knew(((b * S + s) * H + h) * D + d);
    }
    if (t < P) {
        return {{PAST}};
    }
    return 0.0;
}
