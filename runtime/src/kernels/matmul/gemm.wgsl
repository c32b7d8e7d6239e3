// Batched GEMM, one output element per invocation (general strides: transposes, broadcast batch).
// y[b, m, n] = ALPHA * sum_k A[a_off(b) + m*ars + k*acs] * B[b_off(b) + k*brs + n*bcs] + BETA * C[m*crs + n*ccs]
// Parameters: `GemmParams` (ops/matmul.rs).
fn compute(i: u32) -> f32 {
    let M = prm.rows;
    let N = prm.cols;
    let K = prm.k;
    let br = prm.brank;
    let col = i % N;
    let row = (i / N) % M;
    var bidx = i / (M * N);
    var ao = 0u;
    var bo = 0u;
    for (var d = br; d > 0u; d = d - 1u) {
        let dd = d - 1u;
        let s = prm_bshape(dd);
        let c = bidx % s;
        bidx = bidx / s;
        ao = ao + c * prm_a_bstrides(dd);
        bo = bo + c * prm_b_bstrides(dd);
    }
    ao = ao + row * prm.ars;
    bo = bo + col * prm.bcs;
    let acs = prm.acs;
    let brs = prm.brs;
    var acc = 0.0;
    for (var k = 0u; k < K; k = k + 1u) {
        acc = acc + ld_a(ao + k * acs) * ld_b(bo + k * brs);
    }
    var r = {{ALPHA}} * acc;
    {{ADD_C}}
    return r;
}
