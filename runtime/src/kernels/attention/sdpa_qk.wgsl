// The optional qk_matmul_output of ai.onnx Attention, one query row (b, h, s) per workgroup,
// written as f32 [B, HQ, S, T] at row `flat * T`. MODE 0/1: scaled (softcapped) Q·K; 2: plus
// the mask/bias (-inf where masked); 3: the softmax (zero rows where every key is masked).
// Parameters: `SdpaParams`, as sdpa.wgsl.
const NEG_BIG: f32 = -3.0e38;
var<workgroup> qs: array<f32, {{QCAP}}>;

{{KEY_BIAS}}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>{{SG}}) {
    {{SG_INIT}}
    let S = prm.s;
    let HQ = prm.hq;
    let HKV = prm.hkv;
    let DK = prm.dk;
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
    let row = flat * T;
    var m = NEG_BIG;
    for (var t = tid; t < T; t = t + WG) {
        let kbias = key_bias(b, h, s, t);
        var dot = 0.0;
        let kr = kb + t * prm.k_t;
        for (var d = 0u; d < DK; d = d + 1u) { dot = dot + qs[d] * ld_k(kr + d); }
        var sc = dot * {{SCALE}};
        {{SOFTCAP}}
        if ({{MODE}} <= 1u) {
            stf_out(row + t, sc);
        } else if (kbias.y < 0.5) {
            stw_out(row + t, 0xff800000u);
        } else {
            sc = (sc + kbias.x) + kbias.z;
            stf_out(row + t, sc);
            m = max(m, sc);
        }
    }
    if ({{MODE}} == 3u) {
        let mx = wg_max(tid, m);
        var sum = 0.0;
        for (var t = tid; t < T; t = t + WG) {
            var p = 0.0;
            if (key_bias(b, h, s, t).y > 0.5) { p = exp(ld_out(row + t) - mx); }
            stf_out(row + t, p);
            sum = sum + p;
        }
        sum = wg_sum(tid, sum);
        for (var t = tid; t < T; t = t + WG) {
            var p = 0.0;
            if (sum > 0.0) { p = ld_out(row + t) / sum; }
            stf_out(row + t, p);
        }
    }
}
