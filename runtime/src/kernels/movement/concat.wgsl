// Concat along an axis: output viewed as [outer, ctot, inner]; input k covers [off_k, off_k + c_k).
// Parameters: `ConcatParams` (ops/movement.rs).
fn compute(i: u32) -> f32 {
    let inner = prm.inner;
    let ct = prm.total;
    let o = i / (ct * inner);
    let r = i % (ct * inner);
    let c = r / inner;
    let j = r % inner;
    {{SELECT}}
    return 0.0;
}
