// present[b, h, t, d] = past[b, h, t, d] for t < past_b; the new key/value for past_b <= t <
// past_b + S, read straight from its source view (logical [B, S, kvH, D] with strides
// (sb, ss, sh) and offset, so heads are also taken from a packed QKV row) and, for keys, rotated
// here (position past_b + s, `rotate` of rotate.wgsl, shared with rope.wgsl); past (if within the
// past buffer) or 0 after that. PAIR: the values too, in the same pass (`xv` through its view
// (vsb, vss, vsh, voff), `pastv` -> `yv`), so one dispatch appends both.
// past_b = seqlens_k[b] + 1 - S.
// prm: [n, kvH, T, D, S, P, sb, ss, sh, off, rot_dim, half, vsb, vss, vsh, voff, first element
// (kv_append_in_place.wgsl)]
fn new_key(b: u32, s: u32, h: u32, d: u32, pos: u32) -> f32 {
    let base = prm[9] + b * prm[6] + s * prm[7] + h * prm[8];
    let rot = prm[10];
    if (!{{ROTARY}} || d >= rot) { return ld_x(base + d); }
    return rotate(base, d, rot, pos * prm[11]);
}

// (key, value) of element i of present.
fn elem(i: u32) -> vec2<f32> {
    let H = prm[1];
    let T = prm[2];
    let D = prm[3];
    let S = prm[4];
    let P = prm[5];
    let d = i % D;
    let t = (i / D) % T;
    let h = (i / (D * T)) % H;
    let b = i / (D * T * H);
    let pb = ldi_seqlens(b) + 1 - i32(S);
    let ti = i32(t);
    if (ti >= pb && ti < pb + i32(S)) {
        let s = u32(ti - pb);
        let vbase = prm[15] + b * prm[12] + s * prm[13] + h * prm[14];
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
