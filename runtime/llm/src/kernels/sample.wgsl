// Picks the next token from one row of logits, in a single workgroup; only `out[0]` (the id) is
// ever read back.
//
// Parameters: `SampleParams` (sampler.rs): n (vocabulary size), sample (0 greedy, 1 sample),
// inv_temperature, top_k (0: off), top_p (>= 1: off), random (a uniform u32 from the seed and
// the step), row (first element of the row: the last row of [rows, n] logits).
//
// `allowed(i)`'s body is the spec's ALLOWED code: `true` without a mask; with one (binding
// `mask`, one bit per token id) a token whose bit is clear reads as MASKED, below every real logit: it is never the
// argmax, is not counted by top-k and has no weight (every cut-off is at least the smallest
// allowed logit). When nothing is allowed the kernel writes 0xffffffff (-1 as int64).
//
// Greedy is numpy's argmax: the lowest index among equal maxima. Sampling follows Hugging Face's
// processor order: temperature, then top-k, then top-p on the renormalised top-k distribution.
// Both cut-offs are thresholds on the logit value found by bisection (ties at the threshold are
// all kept), then one draw over the kept tokens in index order.

var<workgroup> rv: array<f32, WG>;
var<workgroup> rs: array<f32, WG>;
var<workgroup> ri: array<u32, WG>;
var<workgroup> bf: f32;
var<workgroup> bu: u32;

const MASKED: f32 = -3.4e38;

fn allowed(i: u32) -> bool {
    {{ALLOWED}}
}

fn lg(i: u32) -> f32 {
    if (!allowed(i)) { return MASKED; }
    return ld_logits(prm.row + i);
}

fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return v > bv || (v == bv && i < bi);
}

fn sum_f(t: u32, x: f32) -> f32 {
    rv[t] = x;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (t < s) { rv[t] = rv[t] + rv[t + s]; }
        workgroupBarrier();
    }
    if (t == 0u) { bf = rv[0]; }
    return workgroupUniformLoad(&bf);
}

fn min_f(t: u32, x: f32) -> f32 {
    rv[t] = x;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (t < s) { rv[t] = min(rv[t], rv[t + s]); }
        workgroupBarrier();
    }
    if (t == 0u) { bf = rv[0]; }
    return workgroupUniformLoad(&bf);
}

fn sum_u(t: u32, x: u32) -> u32 {
    ri[t] = x;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (t < s) { ri[t] = ri[t] + ri[t + s]; }
        workgroupBarrier();
    }
    if (t == 0u) { bu = ri[0]; }
    return workgroupUniformLoad(&bu);
}

// Probability mass (unnormalised) of one token when the threshold is `tau`.
fn weight(v: f32, tau: f32, maxv: f32, inv_t: f32) -> f32 {
    if (v >= tau) { return exp((v - maxv) * inv_t); }
    return 0.0;
}

fn mass(t: u32, n: u32, tau: f32, maxv: f32, inv_t: f32) -> f32 {
    var m = 0.0;
    for (var i = t; i < n; i = i + WG) { m = m + weight(lg(i), tau, maxv, inv_t); }
    return sum_f(t, m);
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
    let t = lid.x;
    let n = prm.n;
    var bv = -3.4e38;
    var bi = 0xffffffffu;
    var mn = 3.4e38;
    for (var i = t; i < n; i = i + WG) {
        if (!allowed(i)) { continue; }
        let v = ld_logits(prm.row + i);
        if (better(v, i, bv, bi)) { bv = v; bi = i; }
        mn = min(mn, v);
    }
    rv[t] = bv;
    ri[t] = bi;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (t < s && better(rv[t + s], ri[t + s], rv[t], ri[t])) {
            rv[t] = rv[t + s];
            ri[t] = ri[t + s];
        }
        workgroupBarrier();
    }
    if (t == 0u) { bu = ri[0]; bf = rv[0]; }
    let best = workgroupUniformLoad(&bu);
    let maxv = workgroupUniformLoad(&bf);
    if (prm.sample == 0u) {
        if (t == 0u) { stw_out(0u, best); }
        return;
    }
    let minv = min_f(t, mn);
    let inv_t = prm.inv_temperature;
    let k = prm.top_k;
    var tau = minv;
    if (k > 0u && k < n) {
        // Largest threshold keeping at least k tokens.
        var lo = minv;
        var hi = maxv + 1.0;
        for (var it = 0u; it < 48u; it = it + 1u) {
            let mid = lo + (hi - lo) * 0.5;
            if (mid <= lo || mid >= hi) { break; }
            var c = 0u;
            for (var i = t; i < n; i = i + WG) {
                if (lg(i) >= mid) { c = c + 1u; }
            }
            if (sum_u(t, c) >= k) { lo = mid; } else { hi = mid; }
        }
        tau = lo;
    }
    let top_p = prm.top_p;
    if (top_p < 1.0) {
        // Largest threshold whose kept mass is at least top_p of the top-k mass.
        let goal = top_p * mass(t, n, tau, maxv, inv_t);
        var lo = tau;
        var hi = maxv + 1.0;
        for (var it = 0u; it < 48u; it = it + 1u) {
            let mid = lo + (hi - lo) * 0.5;
            if (mid <= lo || mid >= hi) { break; }
            if (mass(t, n, mid, maxv, inv_t) >= goal) { lo = mid; } else { hi = mid; }
        }
        tau = lo;
    }
    // One draw over the kept tokens, in index order: contiguous slices per invocation.
    let per = (n + WG - 1u) / WG;
    let a = min(t * per, n);
    let b = min(a + per, n);
    var s = 0.0;
    for (var i = a; i < b; i = i + 1u) { s = s + weight(lg(i), tau, maxv, inv_t); }
    rs[t] = s;
    workgroupBarrier();
    if (t == 0u) {
        var acc = 0.0;
        for (var j = 0u; j < WG; j = j + 1u) {
            rv[j] = acc;
            acc = acc + rs[j];
        }
        bf = acc;
    }
    let total = workgroupUniformLoad(&bf);
    let u = f32(prm.random >> 8u) * (1.0 / 16777216.0) * total;
    // Default when rounding puts the draw past the last slice: the most likely token.
    if (t == 0u) { bu = best; }
    workgroupBarrier();
    let pre = rv[t];
    if (s > 0.0 && u >= pre && u < pre + s) {
        var acc = pre;
        var pick = best;
        for (var i = a; i < b; i = i + 1u) {
            let p = weight(lg(i), tau, maxv, inv_t);
            if (p > 0.0) {
                acc = acc + p;
                pick = i;
                if (acc > u) { break; }
            }
        }
        bu = pick;
    }
    workgroupBarrier();
    if (t == 0u) { stw_out(0u, bu); }
}
