
    for (var l = K + t; l < NB * BLOCK; l = l + WG) { xs_set(l, 0.0); }