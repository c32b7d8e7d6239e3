var s2 = 0.0;
    for (var l = t; l < K; l = l + WG) { let u = ld_x(base + l); s2 = s2 + u * u; }
    