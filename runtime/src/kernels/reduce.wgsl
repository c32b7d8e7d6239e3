// Reduction over arbitrary axes.
// prm: [n, rank, count, out_shape[rank] (reduced dims = 1), in_strides[rank], red_shape[rank] (kept dims = 1)]
fn compute(i: u32) -> f32 {
    let r = prm[1];
    let count = prm[2];
    var rem = i;
    var base = 0u;
    for (var d = r; d > 0u; d = d - 1u) {
        let dd = d - 1u;
        let s = prm[3u + dd];
        base = base + (rem % s) * prm[3u + r + dd];
        rem = rem / s;
    }
    var acc = {{INIT}};
    for (var k = 0u; k < count; k = k + 1u) {
        var rk = k;
        var off = base;
        for (var d = r; d > 0u; d = d - 1u) {
            let dd = d - 1u;
            let s = prm[3u + 2u * r + dd];
            off = off + (rk % s) * prm[3u + r + dd];
            rk = rk / s;
        }
        let v = ld_x(off);
        acc = {{ACC}};
    }
    let cnt = f32(count);
    return {{FIN}};
}
