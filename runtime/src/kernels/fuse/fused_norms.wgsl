// Several independent RMS norms (SimplifiedLayerNormalization, no skip/bias) in one dispatch, made
// by the fusion pass (src/fuse.rs): e.g. Gemma's per-head q/k/v norms. Workgroup r normalises
// row r of the inputs' rows taken in turn; the arithmetic is norm.wgsl's (one workgroup per row,
// f32 sums, the same reduction order). A norm may have a tail, `(y + other) [* s]` (rounded like the
// unfused f16 graph with rd()), e.g. Gemma's per-layer inputs. Parameters: `NormsParams`
// (fuse/norms.rs): the end of each norm's rows and (results packed into one binding) the first
// word of each result.

// Rounds to the activation type (f16 graphs round after every op; f32: identity).
fn rd(x: f32) -> f32 {
    {{RD}}
}

{{NORMS}}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>{{SG}}) {
    {{SG_INIT}}
    let row = wid.x + wid.y * nwg.x;
    let t = lid.x;
    {{DISPATCH}}
}
