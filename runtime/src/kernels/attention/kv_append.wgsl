// present[b, h, t, d] = past[b, h, t, d] for t < past_b; the new key/value for past_b <= t <
// past_b + S, read straight from its source view (logical [B, S, kvH, D] with strides
// (sb, ss, sh) and offset, so heads are also taken from a packed QKV row) and, for keys, rotated
// here (position past_b + s, `rotate` of rotate.wgsl, shared with rope.wgsl); past (if within the
// past buffer) or 0 after that. PAIR: the values too, in the same pass (`xv` through its view
// (vsb, vss, vsh, voff), `pastv` -> `yv`), so one dispatch appends both.
// past_b = seqlens_k[b] + 1 - S.
// Parameters: `KvAppendParams` (ops/attention/kv_append.rs).
fn new_key(b: u32, s: u32, h: u32, d: u32, pos: u32) -> f32 {
    let base = prm.off + b * prm.sb + s * prm.ss + h * prm.sh;
    let rot = prm.rot_dim;
    if (!{{ROTARY}} || d >= rot) { return ld_x(base + d); }
    return rotate(base, d, rot, pos * prm.half);
}

// (key, value) of element i of present.
fn elem(i: u32) -> vec2<f32> {
    let H = prm.kv_heads;
    let T = prm.t;
    let D = prm.d;
    let S = prm.s;
    let P = prm.past;
    let d = i % D;
    let t = (i / D) % T;
    let h = (i / (D * T)) % H;
    let b = i / (D * T * H);
    let pb = ldi_seqlens(b) + 1 - i32(S);
    let ti = i32(t);
    if (ti >= pb && ti < pb + i32(S)) {
        let s = u32(ti - pb);
        let vbase = prm.voff + b * prm.vsb + s * prm.vss + h * prm.vsh;
        return vec2<f32>(new_key(b, s, h, d, t), {{NEW_V}});
    }
    if (t < P) {
        return vec2<f32>({{PAST}}, {{PAST_V}});
    }
    return vec2<f32>(0.0, 0.0);
}

// The element-mapped main: `compute` (keys only) or `compute2` (PAIR: keys and values).
fn compute(i: u32) -> f32 { return elem(i).x; }
fn compute2(i: u32) -> vec2<f32> { return elem(i); }
