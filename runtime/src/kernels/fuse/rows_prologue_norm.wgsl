let inv2 = inverseSqrt(wg_sum(t, s2) / f32(K) + {eps});
    for (var w = t; w < K / EPW; w = w + WG) {
        let l = w * EPW;
        let l1 = min(l + 1u, K - 1u);
        st_y(base / EPW + w, rd({x0} * inv2 * ld_g2(l)), rd({x1} * inv2 * ld_g2(l1)));
    }