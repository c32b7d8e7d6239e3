// Reduction over arbitrary axes. Parameters: `ReduceParams` (ops/reduce.rs).
fn compute(i: u32) -> f32 {
    let r = prm.rank;
    let count = prm.count;
    var rem = i;
    var base = 0u;
    for (var d = r; d > 0u; d = d - 1u) {
        let dd = d - 1u;
        let s = prm_out_shape(dd);
        base = base + (rem % s) * prm_in_strides(dd);
        rem = rem / s;
    }
    var acc = {{INIT}};
    for (var k = 0u; k < count; k = k + 1u) {
        var rk = k;
        var off = base;
        for (var d = r; d > 0u; d = d - 1u) {
            let dd = d - 1u;
            let s = prm_red_shape(dd);
            off = off + (rk % s) * prm_in_strides(dd);
            rk = rk / s;
        }
        let v = ld_x(off);
        acc = {{ACC}};
    }
    let cnt = f32(count);
    return {{FIN}};
}
