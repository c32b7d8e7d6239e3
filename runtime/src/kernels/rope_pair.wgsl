// Two rotary embeddings that share cos/sin and positions (a layer's query and key,
// fuse/rotary_pair.rs) in one dispatch, each element computed as rope.wgsl computes it (the
// same `rotate`). Their inputs xa and xb are one address space for `rotate`: element j of xb
// is x element XA + j. The results are ranges of one buffer y: elements [0, prm[23]) the
// first's, from prm[22] the second's; the alignment padding between them is written 0.
// prm: [0]n [1]S, per rotation r (at o = 2 + 9r): [o]B [o+1]H [o+2]D [o+3]sb [o+4]ss [o+5]sh
// [o+6]off [o+7]rot_dim [o+8]hs_swap, then [20]half [21]XA [22]second start [23]first end
fn ld_x(i: u32) -> f32 {
    if (i < prm[21]) { return ld_xa(i); }
    return ld_xb(i - prm[21]);
}

fn rot_row(b: u32, s: u32) -> u32 {
    let S = prm[1];
    return {{COS_ROW}};
}

// Element i of rotation r's result ([B, S, H, D], or [B, H, S, D] when hs_swap); `xo` is where
// its input starts in the joint address space.
fn rope_el(i: u32, o: u32, xo: u32) -> f32 {
    let S = prm[1];
    let H = prm[o + 1u];
    let D = prm[o + 2u];
    let d = i % D;
    var s = 0u;
    var h = 0u;
    if (prm[o + 8u] != 0u) {
        s = (i / D) % S;
        h = (i / (D * S)) % H;
    } else {
        h = (i / D) % H;
        s = (i / (D * H)) % S;
    }
    let b = i / (D * H * S);
    let base = xo + prm[o + 6u] + b * prm[o + 3u] + s * prm[o + 4u] + h * prm[o + 5u];
    let rot = prm[o + 7u];
    if (d >= rot) { return ld_x(base + d); }
    return rotate(base, d, rot, rot_row(b, s) * prm[20]);
}

fn compute(i: u32) -> f32 {
    if (i < prm[23]) { return rope_el(i, 2u, 0u); }
    if (i >= prm[22]) { return rope_el(i - prm[22], 11u, prm[21]); }
    return 0.0;
}
