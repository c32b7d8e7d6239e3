// Present K and V of one Attention node in one dispatch (same shape [B, H, T, D] and storage):
// element i of each is past[b, h, t, d] for t < P and the new token's x[b*sb + h*sh + (t-P)*st + d]
// after it, as `sdpa_kv.wgsl` computes each of them.
// Parameters: `SdpaKvPairParams` (ops/attention/sdpa.rs): H = heads, T = len, D = dim, P = past.
fn compute2(i: u32) -> vec2<f32> {
    let H = prm.heads;
    let T = prm.len;
    let D = prm.dim;
    let P = prm.past;
    let d = i % D;
    let t = (i / D) % T;
    let bh = i / (D * T);
    let h = bh % H;
    let b = bh / H;
    if (t < P) {
        let j = ((b * H + h) * P + t) * D + d;
        return vec2<f32>(ld_pk(j), ld_pv(j));
    }
    let r = t - P;
    return vec2<f32>(
        ld_xk(b * prm.k_b + h * prm.k_h + r * prm.k_t + d),
        ld_xv(b * prm.v_b + h * prm.v_h + r * prm.v_t + d),
    );
}
