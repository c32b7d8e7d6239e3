red[t] = r0;
        red1[t] = r1;
        workgroupBarrier();
        for (var s = TPC / 2u; s > 0u; s = s / 2u) {
            if (lane < s) {
                red[t] = red[t] + red[t + s];
                red1[t] = red1[t] + red1[t + s];
            }
            workgroupBarrier();
        }
        let a0 = red[t];
        let a1 = red1[t];