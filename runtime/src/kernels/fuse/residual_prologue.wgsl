var ss = 0.0;
    for (var l = t; l < K; l = l + WG) { let u = ld_o(l); ss = ss + u * u; }
    let inv1 = inverseSqrt(wg_sum(t, ss) / f32(K) + {eps});
    var s2 = 0.0;
    for (var l = t; l < K; l = l + WG) {
        let h = {h};
        xs_set(l, h);
        s2 = s2 + h * h;
    }
    workgroupBarrier();
    {store}
    