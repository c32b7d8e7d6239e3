let inv2 = inverseSqrt(wg_sum(t, s2) / f32(K) + {eps});
    for (var l = t; l < K; l = l + WG) { xs_set(l, rd(xs_get(l) * inv2 * ld_g2(l))); }