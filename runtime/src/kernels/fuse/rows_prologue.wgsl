// The prologue of a fused group (src/fuse.rs) for any number of rows, when the one-kernel path
// does not run (prefill): workgroup r computes row r of
//   h = (res + RMSNorm(o) * g1) [* scalar]   (RES; otherwise h is the input row x)
//   y = RMSNorm(h) * g2                       (NORM)
// and stores h (RES) and y (NORM). The arithmetic is fused_gemv.wgsl's prologue: f32 sums over
// the row, rounded with rd() wherever the unfused graph stores an f16 value. The group's
// MatMulNBits and epilogue then run as its own ops on these rows, in place of the norm, Cast,
// Add and Mul nodes the prologue replaces.
// Each invocation handles whole output words (EPW elements: pairs for f16), so y reads back the
// h words the same invocation stored.
// Parameters: `RowsPrologueParams` (src/fuse/gemv_wgsl.rs).

const K: u32 = {{K}};
// Elements per stored word: 2 for f16 activations (K even), else 1.
const EPW: u32 = {{EPW}};

// Rounds to the activation type (f16 graphs round after every op; f32: identity).
fn rd(x: f32) -> f32 {
    {{RD}}
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>{{SG}}) {
    {{SG_INIT}}
    let row = wid.x + wid.y * nwg.x;
    // Uniform per workgroup, so the barriers below stay in uniform control flow.
    if (row >= prm.rows) {
        return;
    }
    let t = lid.x;
    let base = row * K;
    let scalar = prm.scalar;
    {{BODY}}
}
