// Elementwise map with broadcasting / strided views (parameters: `EwParams`, ops/elementwise.rs).
// Strides and bases are i32 (negative steps for Slice). With BCAST == false every input is read at i.

fn off(i: u32, k: u32) -> u32 {
    if ({{BCAST}}) {
        let r = prm.rank;
        var rem = i;
        var o = prm_base(k);
        for (var d = r; d > 0u; d = d - 1u) {
            let dd = d - 1u;
            let s = prm_shape(dd);
            let c = rem % s;
            rem = rem / s;
            o = o + i32(c) * prm_strides(k * {{MAX_RANK}} + dd);
        }
        return u32(o);
    }
    return i;
}

fn erf_(x: f32) -> f32 {
    // Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7)
    let t = 1.0 / (1.0 + 0.3275911 * abs(x));
    let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-x * x);
    return select(-y, y, x >= 0.0);
}

fn tanh_(x: f32) -> f32 {
    return tanh(clamp(x, -15.0, 15.0));
}

fn gelu_erf(x: f32) -> f32 {
    return 0.5 * x * (1.0 + erf_(x * 0.7071067811865476));
}

fn gelu_tanh(x: f32) -> f32 {
    return 0.5 * x * (1.0 + tanh_(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

fn pow_(a: f32, b: f32) -> f32 {
    if (b == 0.0) { return 1.0; }
    let r = pow(abs(a), b);
    if (a < 0.0) {
        if (fract(b) == 0.0) { return select(r, -r, (i32(b) & 1) != 0); }
        return f32_bits(0x7fc00000u);
    }
    if (a == 0.0) { return select(0.0, f32_bits(0x7f800000u), b < 0.0); }
    return r;
}

// NaN tested on the bits (WGSL lets compilers assume floats are never NaN, so `x != x` may fold).
fn is_nan_(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// Max and Min that give NaN when either input is NaN (ONNX Runtime's Max / Min).
fn max_(a: f32, b: f32) -> f32 {
    return select(max(a, b), f32_bits(0x7fc00000u), is_nan_(a) || is_nan_(b));
}

fn min_(a: f32, b: f32) -> f32 {
    return select(min(a, b), f32_bits(0x7fc00000u), is_nan_(a) || is_nan_(b));
}

fn b2f(c: bool) -> f32 {
    return select(0.0, 1.0, c);
}

fn compute(i: u32) -> f32 {
    {{LOADS}}
    return {{EXPR}};
}
