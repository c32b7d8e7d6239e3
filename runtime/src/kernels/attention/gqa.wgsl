// Grouped-query attention, flash style (online softmax, no scores buffer). Queries: the logical
// [B, S, H, D] view of `x` read by `load_q` (Q_FN: the GroupQueryAttention query, rotated
// here, or the KV-shared layers' normed and rotated query); k, v: [B, kvH, T, D] (present). The
// G = H / kvH query heads sharing a kv head are taken together: the rows of (b, kvh) are
// r = s * G + g (query s, head h = kvh * G + g), and a workgroup of 128 invocations takes BQ
// consecutive rows (for decode, S = 1: the whole head group) and walks the keys they can see in
// tiles of BKV (BQ * BKV = 128). Per tile: the scores [BQ, BKV] are computed with Q and K staged in
// workgroup memory DC dimensions at a time (one score per invocation), the running max / sum of
// each row are updated (one invocation per row), then each invocation rescales and accumulates its
// share of the [BQ, D] output in registers (dimension pairs 2 tid + 256 j, +1; DPT is even), each V
// element loaded once for all BQ rows.
// CAUSAL: keys visible to query s: t in [first, last], last = past_b + s, past_b (PAST_B: from seqlens_k),
// first = max(0, last - window + 1) when window > 0, else 0. Not CAUSAL: all T keys (the additive
// bias is the mask).
// Grid: x = row tile, y = (b * kvH + kvh) * chunks + chunk.
// Split-K (flash-decoding, chunks > 1): each workgroup takes one chunk of the
// tile's key range and writes (max, sum, unnormalised acc[D]) per row to `part`; gqa_combine.wgsl
// merges the chunks. CHUNKS == 1 writes y directly.
// Parameters: `AttnParams` (ops/attention/flash.rs).
const BQ: u32 = {{BQ}};
const BKV: u32 = {{BKV}};
const DPT: u32 = {{DPT}};
const DC: u32 = 64u;
const DCP: u32 = 65u; // padded row stride of the staged Q/K chunks
const CAUSAL: bool = {{CAUSAL}};

var<workgroup> Qs: array<f32, {{QS_LEN}}>; // [BQ][DCP]
var<workgroup> Ks: array<f32, {{KS_LEN}}>; // [BKV][DCP]
var<workgroup> Ps: array<f32, 128>;         // [BQ][BKV] scores, then probabilities
var<workgroup> row_m: array<f32, {{BQ}}>;
var<workgroup> row_l: array<f32, {{BQ}}>;
var<workgroup> row_a: array<f32, {{BQ}}>;
var<workgroup> row_inv: array<f32, {{BQ}}>; // per-row query scale (RMS norm), else 1

{{Q_FN}}

// Output dimension of accumulator slot i of invocation tid.
fn acc_dim(tid: u32, i: u32) -> u32 {
    return (i >> 1u) * 256u + 2u * tid + (i & 1u);
}

@compute @workgroup_size(128)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let NEG = bitcast<f32>(0xff7fffffu); // -f32::MAX
    let B = prm.b;
    let S = prm.s;
    let H = prm.h;
    let KVH = prm.kv_heads;
    let D = prm.d;
    let T = prm.t;
    let window = prm.window;
    let chunks = prm.chunks;
    let chunk_len = prm.chunk_len;
    let G = H / KVH;
    let SG = S * G;
    let tid = lid.x;
    let r0 = wid.x * BQ;
    let bk = wid.y / chunks; // b * KVH + kvh
    let chunk = wid.y % chunks;
    let b = bk / KVH;
    let kvh = bk % KVH;
    let pb = {{PAST_B}};
    // Key range of the whole tile: from the first row's first key to the last row's last key.
    let s_lo = r0 / G;
    let s_hi = min(r0 + BQ, SG) - 1u;
    var kf = 0;
    var kl = i32(T) - 1;
    if (CAUSAL) {
        if (window > 0) { kf = max(0, pb + i32(s_lo) - window + 1); }
        kl = min(pb + i32(s_hi / G), i32(T) - 1);
    }
    // This workgroup's chunk of it.
    kf = kf + i32(chunk * chunk_len);
    kl = min(kl, kf + i32(chunk_len) - 1);
    let kvbase = bk * T * D;

    // The score invocation: row qi, key kj.
    let qi = tid / BKV;
    let kj = tid % BKV;
    let qrow = r0 + qi;
    let q_ok = qrow < SG;
    let q_s = qrow / G;
    let q_h = kvh * G + qrow % G;
    var q_last = i32(T) - 1;
    var q_first = 0;
    if (CAUSAL) {
        q_last = pb + i32(q_s);
        if (window > 0) { q_first = max(0, q_last - window + 1); }
    }

    if (tid < BQ) {
        row_m[tid] = NEG;
        row_l[tid] = 0.0;
        var inv = 1.0;
        let row = r0 + tid;
        if (row < SG) {
            inv = q_scale(b, row / G, kvh * G + row % G);
        }
        row_inv[tid] = inv;
    }
    workgroupBarrier();
    var acc: array<f32, {{ACC_LEN}}>;
    for (var t0 = kf; t0 <= kl; t0 = t0 + i32(BKV)) {
        // Scores: dot(Q[qi], K[t0 + kj]) over D, DC dimensions at a time.
        var qk = 0.0;
        for (var d0 = 0u; d0 < D; d0 = d0 + DC) {
            for (var e = tid; e < BQ * DC; e = e + 128u) {
                let rr = e / DC;
                let dd = e % DC;
                let row = r0 + rr;
                var v = 0.0;
                if (row < SG && d0 + dd < D) {
                    v = load_q(b, row / G, kvh * G + row % G, d0 + dd, row_inv[rr]);
                }
                Qs[rr * DCP + dd] = v;
            }
            for (var e = tid; e < BKV * DC; e = e + 128u) {
                let jj = e / DC;
                let dd = e % DC;
                let t = t0 + i32(jj);
                var v = 0.0;
                if (t <= kl && d0 + dd < D) {
                    v = ld_k(kvbase + u32(t) * D + d0 + dd);
                }
                Ks[jj * DCP + dd] = v;
            }
            workgroupBarrier();
            let qo = qi * DCP;
            let ko = kj * DCP;
            for (var dd = 0u; dd < DC; dd = dd + 1u) {
                qk = qk + Qs[qo + dd] * Ks[ko + dd];
            }
            workgroupBarrier();
        }
        {
            let tt = u32(t0 + i32(kj));
            let s = q_s;
            let h = q_h;
            var sc = qk * {{SCALE}};
            let visible = q_ok && i32(tt) >= q_first && i32(tt) <= q_last && i32(tt) <= kl;
            if (visible) {
                {{SOFTCAP}}
                {{BIAS}}
            }
            Ps[tid] = select(NEG, sc, visible);
        }
        workgroupBarrier();
        // Online softmax, one invocation per row.
        if (tid < BQ) {
            let m_old = row_m[tid];
            var m_new = m_old;
            for (var j = 0u; j < BKV; j = j + 1u) {
                m_new = max(m_new, Ps[tid * BKV + j]);
            }
            var sum = 0.0;
            for (var j = 0u; j < BKV; j = j + 1u) {
                let sc = Ps[tid * BKV + j];
                let p = select(0.0, exp(sc - m_new), sc != NEG);
                Ps[tid * BKV + j] = p;
                sum = sum + p;
            }
            let alpha = exp(m_old - m_new);
            row_a[tid] = alpha;
            row_l[tid] = row_l[tid] * alpha + sum;
            row_m[tid] = m_new;
        }
        workgroupBarrier();
        // acc = acc * alpha + P · V.
        for (var i = 0u; i < DPT; i = i + 1u) {
            let d = acc_dim(tid, i);
            if (d < D) {
                for (var q = 0u; q < BQ; q = q + 1u) {
                    acc[q * DPT + i] = acc[q * DPT + i] * row_a[q];
                }
                for (var j = 0u; j < BKV; j = j + 1u) {
                    let t = t0 + i32(j);
                    if (t <= kl) {
                        let v = ld_v(kvbase + u32(t) * D + d);
                        for (var q = 0u; q < BQ; q = q + 1u) {
                            acc[q * DPT + i] = acc[q * DPT + i] + Ps[q * BKV + j] * v;
                        }
                    }
                }
            }
        }
        workgroupBarrier();
    }
    {{STORE}}
}
