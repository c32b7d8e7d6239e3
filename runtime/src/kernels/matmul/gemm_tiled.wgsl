// Batched GEMM, tiled (M > 1): y[b, m, n] = ALPHA * sum_k A[a_off(b) + m*ars + k*acs] *
// B[b_off(b) + k*brs + n*bcs] + BETA * C[m*crs + n*ccs], f32 output, or f16 (N even: the tile's
// results staged in workgroup memory, then stored a word of two columns at a time).
// One workgroup of 128 invocations (16 along N x 8 along M) per output tile of TM = 8*RM rows by
// TN = 64 columns of one batch entry; A [TM, TK] and B [TK, TN] tiles staged in workgroup memory
// (k-major), each invocation accumulating an RM x 4 register block (rows tm + 8i, columns tn + 16j).
// Grid: x = column tile, y = batch * row_tiles + row tile.
// Parameters: `GemmParams` (ops/matmul.rs).
const RM: u32 = {{RM}};
const TK: u32 = 32u;
const TM: u32 = 8u * RM;
const TN: u32 = 64u;

var<workgroup> As: array<f32, {{A_LEN}}>; // [TK][TM]
var<workgroup> Bs: array<f32, 2048>;       // [TK][TN]

@compute @workgroup_size(128)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let M = prm.rows;
    let N = prm.cols;
    let K = prm.k;
    let br = prm.brank;
    let ars = prm.ars;
    let acs = prm.acs;
    let brs = prm.brs;
    let bcs = prm.bcs;
    let row_tiles = prm.row_tiles;
    let bi = wid.y / row_tiles;
    let m0 = (wid.y % row_tiles) * TM;
    let n0 = wid.x * TN;
    var bidx = bi;
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
    let tid = lid.x;
    let tn = tid % 16u;
    let tm = tid / 16u;
    var acc: array<vec4<f32>, {{RM}}>;
    for (var k0 = 0u; k0 < K; k0 = k0 + TK) {
        for (var e = tid; e < TM * TK; e = e + 128u) {
            let r = e / TK;
            let kk = e % TK;
            let m = m0 + r;
            let k = k0 + kk;
            var v = 0.0;
            if (m < M && k < K) { v = ld_a(ao + m * ars + k * acs); }
            As[kk * TM + r] = v;
        }
        for (var e = tid; e < TN * TK; e = e + 128u) {
            let kk = e / TN;
            let c = e % TN;
            let n = n0 + c;
            let k = k0 + kk;
            var v = 0.0;
            if (n < N && k < K) { v = ld_b(bo + k * brs + n * bcs); }
            Bs[kk * TN + c] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            let o = kk * TN + tn;
            let bv = vec4<f32>(Bs[o], Bs[o + 16u], Bs[o + 32u], Bs[o + 48u]);
            for (var i = 0u; i < RM; i = i + 1u) {
                acc[i] = acc[i] + As[kk * TM + tm + 8u * i] * bv;
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < RM; i = i + 1u) {
        let row = m0 + tm + 8u * i;
        for (var j = 0u; j < 4u; j = j + 1u) {
            let col = n0 + tn + 16u * j;
            if (row < M && col < N) {
                var r = {{ALPHA}} * acc[i][j];
                {{ADD_C}}
                {{STORE}}
            }
        }
    }
    {{STORE_TILE}}
}
