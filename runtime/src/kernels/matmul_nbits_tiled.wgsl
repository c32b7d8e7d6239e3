// MatMulNBits as a tiled GEMM (M > 1, prefill): y[m, n] = sum_k a[m, k] * (q[n, k] - zp) * scale[n, k/BLOCK]
// (+ bias[n]). B packed as [N, n_blocks, BLOCK*BITS/8] bytes, low bits first; B may be one row
// range [n_off, n_off + n_part) of a split weight (y columns n_off + local n).
// One workgroup of 16 x TMR invocations per output tile of TM = 4 * TMR rows by TN = 64 columns;
// each invocation accumulates a 4 x 4 register block (rows 4 * tm + i, columns 4 * tn + j) in f32.
// The K loop steps by TK (a divisor of BLOCK, so a step lies in one quant block): the A tile
// [TM, TK] (as vec4 along k) and the dequantised B tile [TK, TN] (as vec4 along n) are staged in
// workgroup memory as f32 (B dequantised four columns at a time), and every four k the invocation
// reads 4 + 4 vec4 for 16 vec4 products.
// Edges (M, N, K not multiples of the tile) are zero-filled on load and skipped on store.
// prm: [M, N, K, n_blocks, zp_row_bytes, n_off, n_part]
const BITS: u32 = {{BITS}};
const BLOCK: u32 = {{BLOCK}};
const TMR: u32 = {{TMR}};
const TK: u32 = {{TK}};
const TM: u32 = 4u * TMR;
const TN: u32 = 64u;
const TKQ: u32 = TK / 4u;
const PER_WORD: u32 = 32u / BITS;
const MASK: u32 = (1u << BITS) - 1u;
const BLOB_WORDS: u32 = BLOCK * BITS / 32u;
const TKW: u32 = TK / PER_WORD;

var<workgroup> As: array<vec4<f32>, {{A_LEN}}>; // [TM][TK / 4]
var<workgroup> Bs: array<vec4<f32>, {{B_LEN}}>; // [TK][TN / 4]

fn zero_point(n: u32, b: u32, nb: u32, zrow: u32) -> f32 {
    {{ZP}}
}

fn a_at(m: u32, k: u32, K: u32) -> f32 {
    return select(0.0, ld_a(m * K + min(k, K - 1u)), k < K);
}

@compute @workgroup_size({{WG}})
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
    var acc: array<vec4<f32>, 4>;
    for (var k0 = 0u; k0 < K; k0 = k0 + TK) {
        for (var e = tid; e < TM * TKQ; e = e + WG) {
            let m = m0 + e / TKQ;
            let k = k0 + 4u * (e % TKQ);
            var v = vec4<f32>(0.0);
            if (m < M) {
                v = vec4<f32>(a_at(m, k, K), a_at(m, k + 1u, K), a_at(m, k + 2u, K), a_at(m, k + 3u, K));
            }
            As[e] = v;
        }
        let b = k0 / BLOCK;
        let wofs = (k0 % BLOCK) / PER_WORD;
        // Four columns at a time (a quad of Bs), one weight word each: vec4 dequantisation.
        for (var e = tid; e < 16u * TKW; e = e + WG) {
            let quad = e / TKW;
            let w = e % TKW;
            let kb = w * PER_WORD;
            var words = vec4<u32>(0u);
            var sc = vec4<f32>(0.0);
            var zp = vec4<f32>(0.0);
            for (var l = 0u; l < 4u; l = l + 1u) {
                let nl = n0 + 4u * quad + l;
                if (nl < n_part) {
                    let n = n_off + nl;
                    words[l] = ldw_qw((nl * nb + b) * BLOB_WORDS + wofs + w);
                    sc[l] = ld_scales(n * nb + b);
                    zp[l] = zero_point(n, b, nb, zrow);
                }
            }
            for (var j = 0u; j < PER_WORD; j = j + 1u) {
                let q = vec4<f32>((words >> vec4<u32>(j * BITS)) & vec4<u32>(MASK));
                Bs[(kb + j) * 16u + quad] = select(vec4<f32>(0.0), (q - zp) * sc, k0 + kb + j < K);
            }
        }
        workgroupBarrier();
        for (var q = 0u; q < TKQ; q = q + 1u) {
            let bo = 4u * q * 16u + tn;
            let b0 = Bs[bo];
            let b1 = Bs[bo + 16u];
            let b2 = Bs[bo + 32u];
            let b3 = Bs[bo + 48u];
            for (var i = 0u; i < 4u; i = i + 1u) {
                let a = As[(4u * tm + i) * TKQ + q];
                acc[i] = acc[i] + a.x * b0 + a.y * b1 + a.z * b2 + a.w * b3;
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        let m = m0 + 4u * tm + i;
        if (m < M) {
            for (var j = 0u; j < 4u; j = j + 1u) {
                let nl = n0 + 4u * tn + j;
                if (nl < n_part) {
                    let n = n_off + nl;
                    stf_y(m * N + n, acc[i][j] {{BIAS}});
                }
            }
        }
    }
}
