// Scaled dot-product attention (ai.onnx Attention, com.microsoft MultiHeadAttention): one query
// row (b, h, s) per workgroup, keys in chunks of WG with an online softmax (running max `m` and
// sum `l` per row, f32 accumulation; no score scratch). Each thread owns output dims
// d = tid + j * WG (j < NACC). Masked keys (key_bias(..).y == 0) are skipped, never added as
// -inf; a row without any allowed key writes zeros.
// q element (b, h, s, d) at b*prm[7] + h*prm[8] + s*prm[9] + d; k/v (b, kvh, t, d) at
// b*sb + kvh*sh + t*st + d; y (b, h, s, d) at b*prm[16] + h*prm[17] + s*prm[18] + d.
// prm: [0]B [1]S [2]HQ [3]HKV [4]DK [5]DV [6]T [7..9] q strides [10..12] k strides
//      [13..15] v strides [16..18] y strides [19..22] mask strides (b, h, s, t) [23] mask keys
//      [24] causal offset (i32) [25] left window (i32) [26] right window (i32)
//      [27..30] attention bias strides (b, h, s, t)
const NEG_BIG: f32 = -3.0e38;
var<workgroup> qs: array<f32, {{QCAP}}>;
var<workgroup> sp: array<f32, {{WG}}>;

{{KEY_BIAS}}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>{{SG}}) {
    {{SG_INIT}}
    let S = prm[1];
    let HQ = prm[2];
    let HKV = prm[3];
    let DK = prm[4];
    let DV = prm[5];
    let T = prm[6];
    let flat = wid.x + wid.y * nwg.x;
    if (flat >= prm[0] * HQ * S) { return; }
    let s = flat % S;
    let h = (flat / S) % HQ;
    let b = flat / (S * HQ);
    let kvh = h / (HQ / HKV);
    let tid = lid.x;
    let qb = b * prm[7] + h * prm[8] + s * prm[9];
    for (var d = tid; d < DK; d = d + WG) { qs[d] = ld_q(qb + d); }
    workgroupBarrier();
    let kb = b * prm[10] + kvh * prm[11];
    let vb = b * prm[13] + kvh * prm[14];
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
                let kr = kb + t * prm[12];
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
                    a = a + sp[i] * ld_v(vb + (c0 + i) * prm[15] + d);
                }
                acc[j] = a;
            }
        }
        m = mn;
        workgroupBarrier();
    }
    let yb = b * prm[16] + h * prm[17] + s * prm[18];
    for (var j = 0u; j < {{NACC}}; j = j + 1u) {
        let d = tid + j * WG;
        if (d < DV) {
            var o = 0.0;
            if (l > 0.0) { o = acc[j] / l; }
            stf_y(yb + d, o);
        }
    }
}
