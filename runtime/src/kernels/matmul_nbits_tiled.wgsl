// MatMulNBits as a tiled GEMM (M > 1, prefill): y[m, n] = sum_k a[m, k] * (q[n, k] - zp) * scale
// (+ bias[n]). B packed as [N, n_blocks, BLOCK*BITS/8] bytes, low bits first; B may be one row
// range [n_off, n_off + n_part) of a split weight (y columns n_off + local n).
// One workgroup of 128 invocations (16 along N x 8 along M) per output tile of TM = 8*RM rows by
// TN = 64 columns; the K loop steps by TK (a divisor of BLOCK, so a step lies in one quant block):
// the A tile [TM, TK] and the dequantised B tile [TN, TK] are staged in workgroup memory as f32
// (k-major), and each invocation accumulates an RM x 4 register block (rows tm + 8i, columns
// tn + 16j) in f32. Edges (M, N, K not multiples of the tile) are zero-filled on load and skipped
// on store.
// prm: [M, N, K, n_blocks, zp_row_bytes, n_off, n_part]
const BITS: u32 = {{BITS}};
const BLOCK: u32 = {{BLOCK}};
const RM: u32 = {{RM}};
const TK: u32 = {{TK}};
const TM: u32 = 8u * RM;
const TN: u32 = 64u;
const PER_WORD: u32 = 32u / BITS;
const MASK: u32 = (1u << BITS) - 1u;
const BLOB_WORDS: u32 = BLOCK * BITS / 32u;
const TKW: u32 = TK / PER_WORD;

var<workgroup> As: array<f32, {{A_LEN}}>; // [TK][TM]
var<workgroup> Bs: array<f32, {{B_LEN}}>; // [TK][TN]

fn zero_point(n: u32, b: u32, nb: u32, zrow: u32) -> f32 {
    {{ZP}}
}

@compute @workgroup_size(128)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let M = prm[0];
    let N = prm[1];
    let K = prm[2];
    let nb = prm[3];
    let zrow = prm[4];
    let n_off = prm[5];
    let n_part = prm[6];
    let tid = lid.x;
    let tn = tid % 16u;
    let tm = tid / 16u;
    let n0 = wid.x * TN;
    let m0 = wid.y * TM;
    var acc: array<vec4<f32>, {{RM}}>;
    for (var k0 = 0u; k0 < K; k0 = k0 + TK) {
        for (var e = tid; e < TM * TK; e = e + 128u) {
            let r = e / TK;
            let kk = e % TK;
            let m = m0 + r;
            let k = k0 + kk;
            var v = 0.0;
            if (m < M && k < K) { v = ld_a(m * K + k); }
            As[kk * TM + r] = v;
        }
        let b = k0 / BLOCK;
        let wofs = (k0 % BLOCK) / PER_WORD;
        for (var e = tid; e < TN * TKW; e = e + 128u) {
            let c = e / TKW;
            let w = e % TKW;
            let nl = n0 + c;
            let kb = w * PER_WORD;
            if (nl < n_part) {
                let n = n_off + nl;
                let word = ldw_qw((nl * nb + b) * BLOB_WORDS + wofs + w);
                let sc = ld_scales(n * nb + b);
                let zp = zero_point(n, b, nb, zrow);
                for (var j = 0u; j < PER_WORD; j = j + 1u) {
                    let q = f32((word >> (j * BITS)) & MASK);
                    Bs[(kb + j) * TN + c] = select(0.0, (q - zp) * sc, k0 + kb + j < K);
                }
            } else {
                for (var j = 0u; j < PER_WORD; j = j + 1u) {
                    Bs[(kb + j) * TN + c] = 0.0;
                }
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            let bo = kk * TN + tn;
            let bv = vec4<f32>(Bs[bo], Bs[bo + 16u], Bs[bo + 32u], Bs[bo + 48u]);
            for (var i = 0u; i < RM; i = i + 1u) {
                acc[i] = acc[i] + As[kk * TM + tm + 8u * i] * bv;
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < RM; i = i + 1u) {
        let m = m0 + tm + 8u * i;
        if (m < M) {
            for (var j = 0u; j < 4u; j = j + 1u) {
                let nl = n0 + tn + 16u * j;
                if (nl < n_part) {
                    let n = n_off + nl;
                    stf_y(m * N + n, acc[i][j] {{BIAS}});
                }
            }
        }
    }
}
