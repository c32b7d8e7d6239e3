if (flat == 0u) {
        for (var w = t; w < K / EPW_h; w = w + WG) {
            st_h(w, xs_get(w * EPW_h), xs_get(min(w * EPW_h + 1u, K - 1u)));
        }
    }