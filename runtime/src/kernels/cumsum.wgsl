// Cumulative sum along an axis: x viewed as [outer, L, inner]. prm: [n, L, inner]
fn compute(i: u32) -> f32 {
    let L = prm[1];
    let inner = prm[2];
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
