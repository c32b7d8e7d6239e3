// MatMulNBits: y[m, n] = sum_k a[m, k] * (q[n, k] - zp[n, k/BLOCK]) * scale[n, k/BLOCK] (+ bias[n]).
// B packed as [N, n_blocks, BLOCK*BITS/8] bytes, low bits first. The GEMV for M == 1 (decode;
// M > 1 goes to matmul_nbits_regs.wgsl on software adapters, matmul_nbits_tiled.wgsl on GPUs):
// a workgroup computes COLS columns, TPC threads per column splitting its blocks, each weight
// word dequantised in registers; f32 accumulation, scalar variables only. With 4 bits and K a multiple of 8, a word's eight nibbles
// are taken as two vec4 (the even elements in the low nibbles of its four bytes, the odd ones in
// the high nibbles) and meet the row in two dot products.
// B may be one row range [n_off, n_off + n_part) of a split weight.
// Parameters: `NBitsParams` (ops/quant.rs; M = 1).
var<workgroup> red: array<f32, {{WG}}>;

const BITS: u32 = {{BITS}};
const BLOCK: u32 = {{BLOCK}};
const TPC: u32 = {{TPC}};
const COLS: u32 = WG / TPC;
const PER_WORD: u32 = 32u / BITS;
const MASK: u32 = (1u << BITS) - 1u;
const BLOB_WORDS: u32 = BLOCK * BITS / 32u;

fn bias_at(n: u32) -> f32 {
    {{BIAS_AT}}
}

fn zero_point(n: u32, b: u32, nb: u32, zrow: u32) -> f32 {
    {{ZP}}
}

{{NIBBLES}}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let K = prm.k;
    let nb = prm.blocks;
    let zrow = prm.zp_row;
    let n_off = prm.n_off;
    let n_part = prm.n_part;
    let t = lid.x;
    let lane = t % TPC;
    let n_local = (wid.x + wid.y * nwg.x) * COLS + t / TPC;
    let live = n_local < n_part;
    let n = n_off + n_local;
    var acc = 0.0;
    if (live) {
        for (var b = lane; b < nb; b = b + TPC) {
            let wbase = (n_local * nb + b) * BLOB_WORDS;
            var s1 = 0.0;
            var s2 = 0.0;
            for (var w = 0u; w < BLOB_WORDS; w = w + 1u) {
                let word = ldw_qw(wbase + w);
                let k0 = b * BLOCK + w * PER_WORD;
                {{INNER}}
            }
            let sc = ld_scales(n * nb + b);
            let zp = zero_point(n, b, nb, zrow);
            acc = acc + sc * (s1 - zp * s2);
        }
    }
    red[t] = acc;
    workgroupBarrier();
    for (var s = TPC / 2u; s > 0u; s = s / 2u) {
        if (lane < s) { red[t] = red[t] + red[t + s]; }
        workgroupBarrier();
    }
    if (lane == 0u && live) {
        stf_y(n, red[t] + bias_at(n));
    }
}
