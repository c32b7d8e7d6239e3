// Concat along an axis: output viewed as [outer, ctot, inner]; input k covers [off_k, off_k + c_k).
// prm: [n, inner, ctot, off_0, c_0, off_1, c_1, ...]
fn compute(i: u32) -> f32 {
    let inner = prm[1];
    let ct = prm[2];
    let o = i / (ct * inner);
    let r = i % (ct * inner);
    let c = r / inner;
    let j = r % inner;
    {{SELECT}}
    return 0.0;
}
