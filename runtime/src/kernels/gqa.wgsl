// Grouped-query attention, flash style (online softmax, no scores buffer). q: [B, S, H, D]
// (rotated, f32); k, v: [B, kvH, T, D] (present). The G = H / kvH query heads sharing a kv head
// are taken together: the rows of (b, kvh) are r = s * G + g (query s, head h = kvh * G + g), and a
// workgroup of 128 invocations takes BQ consecutive rows (for decode, S = 1: the whole head group)
// and walks the keys they can see in tiles of BKV (BQ * BKV = 128). Per tile: the scores
// [BQ, BKV] are computed with Q and K staged in workgroup memory DC dimensions at a time (one
// score per invocation), the running max / sum of each row are updated (one invocation per row),
// then each invocation rescales and accumulates its share of the [BQ, D] output (dimensions
// tid + 128 i, i < DPT) in registers, each V element loaded once for all BQ rows.
// Keys visible to query s: t in [first, last], last = past_b + s, past_b = seqlens[b] + 1 - S,
// first = max(0, last - window + 1) when window > 0, else 0.
// Grid: x = row tile, y = (b * kvH + kvh) * chunks + chunk.
// Split-K (flash-decoding, chunks > 1): each workgroup takes one chunk of the
// tile's key range and writes (max, sum, unnormalised acc[D]) per row to `part`; gqa_combine.wgsl
// merges the chunks. CHUNKS == 1 writes y directly.
// prm: [B, S, H, kvH, D, T, window(i32), bias_sb, bias_sh, bias_ss, chunks, chunk_len]
const BQ: u32 = {{BQ}};
const BKV: u32 = {{BKV}};
const DPT: u32 = {{DPT}};
const DC: u32 = 64u;
const DCP: u32 = 65u; // padded row stride of the staged Q/K chunks

var<workgroup> Qs: array<f32, {{QS_LEN}}>; // [BQ][DCP]
var<workgroup> Ks: array<f32, {{KS_LEN}}>; // [BKV][DCP]
var<workgroup> Ps: array<f32, 128>;         // [BQ][BKV] scores, then probabilities
var<workgroup> row_m: array<f32, {{BQ}}>;
var<workgroup> row_l: array<f32, {{BQ}}>;
var<workgroup> row_a: array<f32, {{BQ}}>;

@compute @workgroup_size(128)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let NEG = bitcast<f32>(0xff7fffffu); // -f32::MAX
    let B = prm[0];
    let S = prm[1];
    let H = prm[2];
    let KVH = prm[3];
    let D = prm[4];
    let T = prm[5];
    let window = bitcast<i32>(prm[6]);
    let chunks = prm[10];
    let chunk_len = prm[11];
    let G = H / KVH;
    let SG = S * G;
    let tid = lid.x;
    let r0 = wid.x * BQ;
    let bk = wid.y / chunks; // b * KVH + kvh
    let chunk = wid.y % chunks;
    let b = bk / KVH;
    let kvh = bk % KVH;
    let pb = ldi_seqlens(b) + 1 - i32(S);
    // Key range of the whole tile: from the first row's first key to the last row's last key.
    let s_lo = r0 / G;
    let s_hi = min(r0 + BQ, SG) - 1u;
    var kf = 0;
    if (window > 0) { kf = max(0, pb + i32(s_lo) - window + 1); }
    var kl = min(pb + i32(s_hi / G), i32(T) - 1);
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
    let q_last = pb + i32(q_s);
    var q_first = 0;
    if (window > 0) { q_first = max(0, q_last - window + 1); }

    if (tid < BQ) {
        row_m[tid] = NEG;
        row_l[tid] = 0.0;
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
                    let s = row / G;
                    let h = kvh * G + row % G;
                    v = ld_q(((b * S + s) * H + h) * D + d0 + dd);
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
            let d = tid + 128u * i;
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
