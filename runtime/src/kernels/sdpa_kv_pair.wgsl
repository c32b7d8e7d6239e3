// Present K and V of one Attention node in one dispatch (same shape [B, H, T, D] and storage):
// element i of each is past[b, h, t, d] for t < P and the new token's x[b*sb + h*sh + (t-P)*st + d]
// after it, as `sdpa_kv.wgsl` computes each of them.
// prm: [0]n [1]H [2]T [3]D [4]P [5]k sb [6]k sh [7]k st [8]v sb [9]v sh [10]v st
fn compute2(i: u32) -> vec2<f32> {
    let H = prm[1];
    let T = prm[2];
    let D = prm[3];
    let P = prm[4];
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
        ld_xk(b * prm[5] + h * prm[6] + r * prm[7] + d),
        ld_xv(b * prm[8] + h * prm[9] + r * prm[10] + d),
    );
}
