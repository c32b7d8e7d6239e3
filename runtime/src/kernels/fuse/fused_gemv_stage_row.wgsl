var s2 = 0.0;
    for (var l = t; l < K; l = l + WG) { let h = ld_x(l); xs_set(l, h); s2 = s2 + h * h; }
    