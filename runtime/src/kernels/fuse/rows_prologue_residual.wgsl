var ss = 0.0;
    for (var l = t; l < K; l = l + WG) { let u = ld_o(base + l); ss = ss + u * u; }
    let inv1 = inverseSqrt(wg_sum(t, ss) / f32(K) + {eps});
    var s2 = 0.0;
    for (var w = t; w < K / EPW; w = w + WG) {
        let l = w * EPW;
        let l1 = min(l + 1u, K - 1u);
        let h0 = {h0};
        let h1 = {h1};
        st_h(base / EPW + w, h0, h1);
        s2 = s2 + h0 * h0;
        if (EPW == 2u) { s2 = s2 + h1 * h1; }
    }
    