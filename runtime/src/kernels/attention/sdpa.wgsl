// Scaled dot-product attention (ai.onnx Attention, com.microsoft MultiHeadAttention): one query
// row (b, h, s) per workgroup, keys in chunks of WG with an online softmax (running max `m` and
// sum `l` per row, f32 accumulation; no score scratch). Each thread owns output dims
// d = tid + j * WG (j < NACC). Masked keys (key_bias(..).y == 0) are skipped, never added as
// -inf; a row without any allowed key writes zeros. The output is f32 (each thread its dims), or
// f16 (STORE_Y: through workgroup memory, a word of two dims per store).
// q element (b, h, s, d) at b*prm.q_b + h*prm.q_h + s*prm.q_s + d; k/v (b, kvh, t, d) at
// b*k_b + kvh*k_h + t*k_t + d; y (b, h, s, d) at b*prm.y_b + h*prm.y_h + s*prm.y_s + d.
// Parameters: `SdpaParams` (ops/attention/sdpa.rs).
const NEG_BIG: f32 = -3.0e38;
var<workgroup> qs: array<f32, {{QCAP}}>;
var<workgroup> sp: array<f32, {{WG}}>;

{{KEY_BIAS}}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>{{SG}}) {
    {{SG_INIT}}
    let S = prm.s;
    let HQ = prm.hq;
    let HKV = prm.hkv;
    let DK = prm.dk;
    let DV = prm.dv;
    let T = prm.t;
    let flat = wid.x + wid.y * nwg.x;
    if (flat >= prm.batch * HQ * S) { return; }
    let s = flat % S;
    let h = (flat / S) % HQ;
    let b = flat / (S * HQ);
    let kvh = h / (HQ / HKV);
    let tid = lid.x;
    let qb = b * prm.q_b + h * prm.q_h + s * prm.q_s;
    for (var d = tid; d < DK; d = d + WG) { qs[d] = ld_q(qb + d); }
    workgroupBarrier();
    let kb = b * prm.k_b + kvh * prm.k_h;
    let vb = b * prm.v_b + kvh * prm.v_h;
    var m = NEG_BIG;
    var l = 0.0;
    var acc: array<f32, {{NACC}}>;
    for (var c0 = 0u; c0 < T; c0 = c0 + WG) {
        let t = c0 + tid;
        var sc = NEG_BIG;
        var ok = false;
        if (t < T) {
            let kbias = key_bias(b, h, s, t);
            if (kbias.y > 0.5) {
                var dot = 0.0;
                let kr = kb + t * prm.k_t;
                for (var d = 0u; d < DK; d = d + 1u) { dot = dot + qs[d] * ld_k(kr + d); }
                sc = dot * {{SCALE}};
                {{SOFTCAP}}
                sc = (sc + kbias.x) + kbias.z;
                ok = true;
            }
        }
        let mn = max(m, wg_max(tid, sc));
        var p = 0.0;
        if (ok) { p = exp(sc - mn); }
        let alpha = exp(m - mn);
        sp[tid] = p;
        l = l * alpha + wg_sum(tid, p);
        let n = min(WG, T - c0);
        for (var j = 0u; j < {{NACC}}; j = j + 1u) {
            let d = tid + j * WG;
            if (d < DV) {
                var a = acc[j] * alpha;
                for (var i = 0u; i < n; i = i + 1u) {
                    a = a + sp[i] * ld_v(vb + (c0 + i) * prm.v_t + d);
                }
                acc[j] = a;
            }
        }
        m = mn;
        workgroupBarrier();
    }
    let yb = b * prm.y_b + h * prm.y_h + s * prm.y_s;
    var o: array<f32, {{NACC}}>;
    for (var j = 0u; j < {{NACC}}; j = j + 1u) {
        if (l > 0.0) { o[j] = acc[j] / l; }
    }
    store_y(yb, tid, &o);
}

{{STORE_Y}}
