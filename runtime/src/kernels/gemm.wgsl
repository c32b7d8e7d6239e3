// Batched GEMM, one output element per invocation (general strides: transposes, broadcast batch).
// y[b, m, n] = ALPHA * sum_k A[a_off(b) + m*ars + k*acs] * B[b_off(b) + k*brs + n*bcs] + BETA * C[m*crs + n*ccs]
// prm: [n, M, N, K, brank, ars, acs, brs, bcs, crs, ccs, bshape[brank], a_bstr[brank], b_bstr[brank]]
fn compute(i: u32) -> f32 {
    let M = prm[1];
    let N = prm[2];
    let K = prm[3];
    let br = prm[4];
    let col = i % N;
    let row = (i / N) % M;
    var bidx = i / (M * N);
    var ao = 0u;
    var bo = 0u;
    for (var d = br; d > 0u; d = d - 1u) {
        let dd = d - 1u;
        let s = prm[11u + dd];
        let c = bidx % s;
        bidx = bidx / s;
        ao = ao + c * prm[11u + br + dd];
        bo = bo + c * prm[11u + 2u * br + dd];
    }
    ao = ao + row * prm[5];
    bo = bo + col * prm[8];
    let acs = prm[6];
    let brs = prm[7];
    var acc = 0.0;
    for (var k = 0u; k < K; k = k + 1u) {
        acc = acc + ld_a(ao + k * acs) * ld_b(bo + k * brs);
    }
    var r = {{ALPHA}} * acc;
    {{ADD_C}}
    return r;
}
