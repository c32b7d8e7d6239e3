// Cumulative sum along an axis: x viewed as [outer, L, inner]. Parameters: `CumSumParams`
// (ops/reduce.rs).
fn compute(i: u32) -> f32 {
    let L = prm.len;
    let inner = prm.inner;
    let j = i % inner;
    let l = (i / inner) % L;
    let o = i / (inner * L);
    var acc = 0.0;
    for (var k = 0u; k < L; k = k + 1u) {
        var take = k <= l;
        if ({{REVERSE}}) { take = k >= l; }
        if ({{EXCLUSIVE}}) { take = take && k != l; }
        if (take) { acc = acc + ld_x((o * L + k) * inner + j); }
    }
    return acc;
}
