// Batched GEMM, one output element per invocation (general strides: transposes, broadcast batch).
// y[b, m, n] = ALPHA * sum_k A[a_off(b) + m*ars + k*acs] * B[b_off(b) + k*brs + n*bcs] + BETA * C[m*crs + n*ccs]
// meta: [n, M, N, K, brank, ars, acs, brs, bcs, crs, ccs, bshape[brank], a_bstr[brank], b_bstr[brank]]
fn compute(i: u32) -> f32 {
    let M = meta[1];
    let N = meta[2];
    let K = meta[3];
    let br = meta[4];
    let col = i % N;
    let row = (i / N) % M;
    var bidx = i / (M * N);
    var ao = 0u;
    var bo = 0u;
    for (var d = br; d > 0u; d = d - 1u) {
        let dd = d - 1u;
        let s = meta[11u + dd];
        let c = bidx % s;
        bidx = bidx / s;
        ao = ao + c * meta[11u + br + dd];
        bo = bo + c * meta[11u + 2u * br + dd];
    }
    ao = ao + row * meta[5];
    bo = bo + col * meta[8];
    let acs = meta[6];
    let brs = meta[7];
    var acc = 0.0;
    for (var k = 0u; k < K; k = k + 1u) {
        acc = acc + ld_a(ao + k * acs) * ld_b(bo + k * brs);
    }
    var r = {{ALPHA}} * acc;
    {{ADD_C}}
    return r;
}
