// The query of a prompt (S > 1) as the attention kernel reads it (Q_FN: rotated, and for the
// KV-shared layers RMS-normed), written once as f32 [B, S, H, D]: gqa.wgsl stages Q again for
// every key tile, so a prompt's attention reads this instead of redoing the rotation each time.
// One workgroup per row (b, s, h). Parameters: as gqa.wgsl's (`AttnParams`).
var<workgroup> inv_s: f32;

{{Q_FN}}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let B = prm.b;
    let S = prm.s;
    let H = prm.h;
    let D = prm.d;
    let row = wid.x + wid.y * nwg.x;
    if (row >= B * S * H) { return; }
    let h = row % H;
    let s = (row / H) % S;
    let b = row / (H * S);
    if (lid.x == 0u) { inv_s = q_scale(b, s, h); }
    workgroupBarrier();
    let inv = inv_s;
    for (var d = lid.x; d < D; d = d + 64u) {
        stf_y(row * D + d, load_q(b, s, h, d, inv));
    }
}
