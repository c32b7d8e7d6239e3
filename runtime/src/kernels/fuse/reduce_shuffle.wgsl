var a0 = r0;
        var a1 = r1;
        for (var s = TPC / 2u; s > 0u; s = s / 2u) {
            a0 = a0 + subgroupShuffleXor(a0, s);
            a1 = a1 + subgroupShuffleXor(a1, s);
        }