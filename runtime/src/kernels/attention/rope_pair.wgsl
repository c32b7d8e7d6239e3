// Two rotary embeddings that share cos/sin and positions (a layer's query and key,
// fuse/rotary_pair.rs) in one dispatch, each element computed as rope.wgsl computes it (the
// same `rotate`). Their inputs xa and xb are one address space for `rotate`: element j of xb
// is x element XA + j (XA = prm.xa). The results are ranges of one buffer y: elements
// [0, prm.first_end) the first's, from prm.second the second's; the alignment padding between
// them is written 0. Parameters: `RopePairParams` (ops/attention/rotary.rs), per rotation r
// element r of its arrays.
fn ld_x(i: u32) -> f32 {
    if (i < prm.xa) { return ld_xa(i); }
    return ld_xb(i - prm.xa);
}

fn rot_row(b: u32, s: u32) -> u32 {
    let S = prm.s;
    return {{COS_ROW}};
}

// Element i of rotation r's result ([B, S, H, D], or [B, H, S, D] when hs_swap); `xo` is where
// its input starts in the joint address space.
fn rope_el(i: u32, r: u32, xo: u32) -> f32 {
    let S = prm.s;
    let H = prm_heads(r);
    let D = prm_d(r);
    let d = i % D;
    var s = 0u;
    var h = 0u;
    if (prm_hs_swap(r) != 0u) {
        s = (i / D) % S;
        h = (i / (D * S)) % H;
    } else {
        h = (i / D) % H;
        s = (i / (D * H)) % S;
    }
    let b = i / (D * H * S);
    let base = xo + prm_off(r) + b * prm_sb(r) + s * prm_ss(r) + h * prm_sh(r);
    let rot = prm_rot_dim(r);
    if (d >= rot) { return ld_x(base + d); }
    return rotate(base, d, rot, rot_row(b, s) * prm.half);
}

fn compute(i: u32) -> f32 {
    if (i < prm.first_end) { return rope_el(i, 0u, 0u); }
    if (i >= prm.second) { return rope_el(i - prm.second, 1u, prm.xa); }
    return 0.0;
}
