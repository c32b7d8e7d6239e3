//! Block-quantised weights: MatMulNBits (GEMV/GEMM with dequantisation in registers) and
//! GatherBlockQuantized (embedding rows), both com.microsoft.

use super::elementwise::cast_gpu;
use super::{Attrs, MS, Op, Registry, req};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor, Value};
use crate::gpu::{Kernel, Storage};
use crate::tensor::{DType, numel};

const MNB: &str = include_str!("../kernels/quant/matmul_nbits.wgsl");
const MNB_TILED: &str = include_str!("../kernels/quant/matmul_nbits_tiled.wgsl");
const MNB_REGS: &str = include_str!("../kernels/quant/matmul_nbits_regs.wgsl");
const GBQ: &str = include_str!("../kernels/quant/gather_block_quantized.wgsl");

/// WGSL for the zero point of block `b` of row `n`: packed uint8 (`zp` is [`Storage::U8`]),
/// float, or the default (`None`).
fn zp_code(zp: Option<Storage>, bits: u32) -> String {
    match zp {
        None => format!("return {}.0;", 1u32 << (bits - 1)),
        Some(Storage::U8) if bits == 4 => "let byte = u32(ldi_zp(n * zrow + b / 2u)); return f32((byte >> ((b & 1u) * 4u)) & 15u);".into(),
        Some(Storage::U8) => "return f32(ldi_zp(n * zrow + b));".into(),
        Some(_) => "return ld_zp(n * nb + b);".into(),
    }
}

/// WGSL `nib_lo(w)` / `nib_hi(w)`: the four low nibbles of a 4-bit weight word's bytes (its even
/// elements) and the four high ones (its odd elements), as vec4 — the word layout both 4-bit
/// GEMVs (`matmul_nbits.wgsl`, the fused GEMV) read.
pub(crate) const NIBBLES_WGSL: &str = "fn nib_lo(w: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(15u));
}
fn nib_hi(w: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w) >> vec4<u32>(4u, 12u, 20u, 28u)) & vec4<u32>(15u));
}";

/// Threads per output column of the GEMV kernel, by the number of quant blocks in a row.
fn tpc_of(nb: usize) -> u32 {
    if nb >= 128 { 16 } else { 8 }
}

/// The GEMV kernel's inner step over one weight word (`word`, first element `k0`): any width.
const GEMV_INNER: &str = "for (var j = 0u; j < PER_WORD; j = j + 1u) {
                    let k = k0 + j;
                    if (k < K) {
                        let q = f32((word >> (j * BITS)) & MASK);
                        let av = ld_a(k);
                        s1 = s1 + av * q;
                        s2 = s2 + av;
                    }
                }";

/// The same for 4 bits and K a multiple of 8 (a word lies wholly before K or after it): the
/// nibbles as two vec4, against the row's even and odd elements.
const GEMV_INNER_4BIT: &str = "if (k0 < K) {
                    let ae = vec4<f32>(ld_a(k0), ld_a(k0 + 2u), ld_a(k0 + 4u), ld_a(k0 + 6u));
                    let ao = vec4<f32>(ld_a(k0 + 1u), ld_a(k0 + 3u), ld_a(k0 + 5u), ld_a(k0 + 7u));
                    s1 = s1 + dot(nib_lo(word), ae) + dot(nib_hi(word), ao);
                    s2 = s2 + dot(ae + ao, vec4<f32>(1.0));
                }";

/// The tiled GEMM's register block, unrolled: accumulators `acc{c}{i}` (column quad c, row i).
/// With `f16` the results are stored as f16 pairs (columns `4q + j`, `+ 1`: N and every part's
/// columns even), rounded once from the f32 sums as a separate Cast would.
fn tiled_code(cq: u32, f16: bool) -> (String, String, String) {
    let mut acc = String::new();
    let mut compute = String::new();
    let mut store = String::new();
    for i in 0..4 {
        compute.push_str(&format!("let a{i} = As[(4u * tm + {i}u) * TKQ + q];\n"));
    }
    for c in 0..cq {
        compute.push_str(&format!("let bo{c} = 64u * q + tn + {c}u * LN;\n"));
        for j in 0..4 {
            compute.push_str(&format!("let b{c}{j} = Bs[bo{c} + {}u];\n", 16 * j));
        }
        for i in 0..4 {
            acc.push_str(&format!("var acc{c}{i} = vec4<f32>(0.0);\n"));
            compute.push_str(&format!(
                "acc{c}{i} = acc{c}{i} + a{i}.x * b{c}0 + a{i}.y * b{c}1 + a{i}.z * b{c}2 + a{i}.w * b{c}3;\n"
            ));
            store.push_str(&if f16 {
                format!(
                    "{{ let m = m0 + 4u * tm + {i}u; if (m < M) {{ for (var j = 0u; j < 4u; j = j + 2u) {{ let nl = n0 + 4u * (tn + {c}u * LN) + j; if (nl < n_part) {{ let n = n_off + nl; st_y((m * N + n) / 2u, acc{c}{i}[j] + bias_at(n), acc{c}{i}[j + 1u] + bias_at(n + 1u)); }} }} }} }}\n"
                )
            } else {
                format!(
                    "{{ let m = m0 + 4u * tm + {i}u; if (m < M) {{ for (var j = 0u; j < 4u; j = j + 1u) {{ let nl = n0 + 4u * (tn + {c}u * LN) + j; if (nl < n_part) {{ let n = n_off + nl; stf_y(m * N + n, acc{c}{i}[j] + bias_at(n)); }} }} }} }}\n"
                )
            });
        }
    }
    (acc, compute, store)
}

/// The software-adapter GEMM's R x C block, unrolled (`matmul_nbits_regs.wgsl`): declarations,
/// the quant block's start, one weight word's eight k, the block's end, and the stores.
/// `f16_a`: activations are f16 pairs (one word gives two k); `f16_out`: results stored as f16
/// pairs (C even, and N and every part's columns even).
struct RegsCode {
    decl: String,
    block_start: String,
    word: String,
    block_end: String,
    store: String,
}

/// The [`RegsCode`] of an `r` x `c` block (see there for `f16_a` and `f16_out`).
fn regs_code(r: u32, c: u32, f16_a: bool, f16_out: bool) -> RegsCode {
    let mut decl = String::new();
    let mut block_start = String::new();
    let mut word = String::new();
    let mut block_end = String::new();
    let mut store = String::new();
    for i in 0..r {
        let words = if f16_a { "K / 2u" } else { "K" };
        decl.push_str(&format!(
            "let ar{i} = min(m0 + {i}u, M - 1u) * ({words});\n"
        ));
        block_start.push_str(&format!("var s{i} = 0.0;\n"));
    }
    for j in 0..c {
        decl.push_str(&format!(
            "let nl{j} = min(n0 + {j}u, n_part - 1u);\nlet cn{j} = n_off + nl{j};\nlet qb{j} = nl{j} * nb * BLOB_WORDS;\n"
        ));
        word.push_str(&format!("let w{j} = ldw_qw(qb{j} + kw);\n"));
        block_end.push_str(&format!(
            "let sc{j} = ld_scales(cn{j} * nb + b);\nlet z{j} = zero_point(cn{j}, b, nb, zrow);\n"
        ));
    }
    for i in 0..r {
        for j in 0..c {
            decl.push_str(&format!("var acc{i}_{j} = 0.0;\n"));
            block_start.push_str(&format!("var p{i}_{j} = 0.0;\n"));
            block_end.push_str(&format!(
                "acc{i}_{j} = acc{i}_{j} + sc{j} * (p{i}_{j} - z{j} * s{i});\n"
            ));
        }
        if f16_a {
            for h in 0..4 {
                word.push_str(&format!(
                    "let h{i}_{h} = unpack2x16float(ldw_a(ar{i} + kw * 4u + {h}u));\n"
                ));
            }
            for k in 0..8 {
                word.push_str(&format!("let a{i}_{k} = h{i}_{}[{}];\n", k / 2, k % 2));
            }
        } else {
            for k in 0..8 {
                word.push_str(&format!("let a{i}_{k} = ld_a(ar{i} + kw * 8u + {k}u);\n"));
            }
        }
        let sum: Vec<String> = (0..8).map(|k| format!("a{i}_{k}")).collect();
        word.push_str(&format!("s{i} = s{i} + {};\n", sum.join(" + ")));
    }
    for k in 0..8 {
        for j in 0..c {
            word.push_str(&format!("let q{j}_{k} = nib(w{j}, {}u);\n", 4 * k));
            for i in 0..r {
                word.push_str(&format!("p{i}_{j} = p{i}_{j} + a{i}_{k} * q{j}_{k};\n"));
            }
        }
    }
    for i in 0..r {
        store.push_str(&format!(
            "if (m0 + {i}u < M) {{\nlet row{i} = (m0 + {i}u) * N;\n"
        ));
        if f16_out {
            for j in (0..c).step_by(2) {
                store.push_str(&format!(
                    "if (n0 + {j}u < n_part) {{ let n = n_off + n0 + {j}u; st_y((row{i} + n) / 2u, acc{i}_{j} + bias_at(n), acc{i}_{} + bias_at(n + 1u)); }}\n",
                    j + 1
                ));
            }
        } else {
            for j in 0..c {
                store.push_str(&format!(
                    "if (n0 + {j}u < n_part) {{ let n = n_off + n0 + {j}u; stf_y(row{i} + n, acc{i}_{j} + bias_at(n)); }}\n"
                ));
            }
        }
        store.push_str("}\n");
    }
    RegsCode {
        decl,
        block_start,
        word,
        block_end,
        store,
    }
}

/// The register block (rows, columns) of the software-adapter GEMM for M rows: 8 x 16 (4 x 16
/// for up to 4 rows). Measured at M = 128, K = 1536, N = 6144 (`cargo run --release -p
/// gg-runtime --example gemm`): on lavapipe 8 x 16 was the fastest of 4-16 rows by 8-32 columns;
/// on SwiftShader the larger blocks were within its run-to-run noise of each other.
fn regs_shape(m: usize) -> (u32, u32) {
    (if m <= 4 { 4 } else { 8 }, 16)
}

/// The row ranges of a weight: one part for an ordinary tensor, several for a split one.
fn parts(cx: &mut Ctx<'_>, v: &Value) -> Result<Vec<(usize, GpuTensor)>> {
    let t = cx.to_gpu(v)?;
    Ok(match &t.split {
        Some(parts) => parts.as_ref().clone(),
        None => vec![(0, t)],
    })
}

fn opt_gpu(cx: &mut Ctx<'_>, inputs: &[Option<&Value>], i: usize) -> Result<Option<GpuTensor>> {
    match inputs.get(i).copied().flatten() {
        Some(v) => Ok(Some(cx.to_gpu(v)?)),
        None => Ok(None),
    }
}

/// Which MatMulNBits kernel runs, with what its grid depends on.
#[derive(Clone, Copy)]
enum Shape {
    /// `matmul_nbits.wgsl` (M == 1): 64 invocations per 64 / TPC columns.
    Gemv,
    /// `matmul_nbits_regs.wgsl`: one invocation per (rows, columns) block.
    Regs(u32, u32),
    /// `matmul_nbits_tiled.wgsl`: workgroups of 4 * TMR rows by 64 columns.
    Tiled(u32),
}

crate::gpu_params! {
    /// The MatMulNBits kernels' parameters: the sizes, and the weight part a dispatch computes.
    struct NBitsParams {
        /// Rows of A (and of y).
        m: u32,
        /// Columns of y (every weight part's together).
        n: u32,
        /// A's row length.
        k: u32,
        /// Quant blocks per weight column.
        blocks: u32,
        /// Bytes of packed uint8 zero points per weight column.
        zp_row: u32,
        /// The part's first column.
        n_off: u32,
        /// The part's columns.
        n_part: u32,
    }
}

/// What the code of every MatMulNBits kernel depends on: the attributes, the storages and the
/// optional inputs present.
#[derive(Clone, Copy, Hash)]
struct NBitsIo {
    bits: u32,
    block: u32,
    /// A's storage (f16: the regs GEMM reads pairs).
    a: Storage,
    scales: Storage,
    /// The zero points' storage (`None`: the default zero point).
    zp: Option<Storage>,
    bias: Option<Storage>,
    /// The result's: f32, or f16 stored directly by the GEMMs.
    y: Storage,
}

impl NBitsIo {
    /// `kern` with the constants, bindings and parameters every MatMulNBits kernel has.
    fn declare(&self, kern: Kernel) -> Kernel {
        let mut kern = kern
            .params::<NBitsParams>()
            .u32("BITS", self.bits)
            .u32("BLOCK", self.block)
            .code("ZP", &zp_code(self.zp, self.bits))
            .input("a", self.a)
            .input("qw", Storage::U8)
            .input("scales", self.scales);
        if let Some(z) = self.zp {
            kern = kern.input("zp", z);
        }
        if let Some(bs) = self.bias {
            kern = kern.input("bias", bs).code("BIAS_AT", "return ld_bias(n);");
        } else {
            kern = kern.code("BIAS_AT", "return 0.0;");
        }
        kern.output("y", self.y)
    }
}

/// `matmul_nbits.wgsl`, the GEMV (M == 1).
#[derive(Hash)]
struct GemvSpec {
    io: NBitsIo,
    /// Threads per output column ([`tpc_of`]).
    tpc: u32,
    /// 4-bit weights and K a multiple of 8: [`GEMV_INNER_4BIT`] (otherwise [`GEMV_INNER`]).
    nibbles: bool,
}

impl crate::gpu::KernelSpec for GemvSpec {
    const NAME: &'static str = "matmul_nbits";
    const WGSL: &'static [&'static str] = &[MNB, NIBBLES_WGSL, GEMV_INNER, GEMV_INNER_4BIT];
    fn build(&self, _: &crate::gpu::Features) -> Kernel {
        let inner = if self.nibbles {
            GEMV_INNER_4BIT
        } else {
            GEMV_INNER
        };
        let kern = Kernel::new("matmul_nbits", MNB)
            .workgroup(64)
            .u32("TPC", self.tpc)
            .code("NIBBLES", NIBBLES_WGSL)
            .code("INNER", inner);
        self.io.declare(kern)
    }
}

/// `matmul_nbits_regs.wgsl`, the software adapters' register-block GEMM (4-bit weights).
#[derive(Hash)]
struct RegsSpec {
    io: NBitsIo,
    /// Rows of the register block.
    r: u32,
    /// Columns of the register block.
    c: u32,
}

impl crate::gpu::KernelSpec for RegsSpec {
    const NAME: &'static str = "matmul_nbits_regs";
    const WGSL: &'static [&'static str] = &[MNB_REGS];
    fn build(&self, _: &crate::gpu::Features) -> Kernel {
        let code = regs_code(
            self.r,
            self.c,
            self.io.a == Storage::F16,
            self.io.y == Storage::F16,
        );
        let kern = Kernel::new("matmul_nbits_regs", MNB_REGS)
            .workgroup(64)
            .u32("R", self.r)
            .u32("C", self.c)
            .code("DECL", &code.decl)
            .code("BLOCK_START", &code.block_start)
            .code("WORD", &code.word)
            .code("BLOCK_END", &code.block_end)
            .code("STORE", &code.store);
        self.io.declare(kern)
    }
}

/// `matmul_nbits_tiled.wgsl`, the tiled GEMM (prefill on GPUs).
#[derive(Hash)]
struct TiledSpec {
    io: NBitsIo,
    /// Register rows: tiles of TM = 4 * TMR rows.
    tmr: u32,
    /// The K step (a divisor of the block).
    tk: u32,
}

impl crate::gpu::KernelSpec for TiledSpec {
    const NAME: &'static str = "matmul_nbits_tiled";
    const WGSL: &'static [&'static str] = &[MNB_TILED];
    fn build(&self, _: &crate::gpu::Features) -> Kernel {
        let (tmr, tk) = (self.tmr, self.tk);
        // Column quads per invocation: a 4 x 4·CQ register block, at least 16 invocations per
        // workgroup.
        let cq = tmr.min(4);
        let (acc, compute, store) = tiled_code(cq, self.io.y == Storage::F16);
        let kern = Kernel::new("matmul_nbits_tiled", MNB_TILED)
            .workgroup(16 / cq * tmr)
            .u32("CQ", cq)
            .code("ACC", &acc)
            .code("COMPUTE", &compute)
            .code("STORE", &store)
            .u32("TMR", tmr)
            .u32("TK", tk)
            .u32("A_LEN", tk * tmr)
            .u32("B_LEN", tk * 16);
        self.io.declare(kern)
    }
}

struct MatMulNBits {
    k: usize,
    n: usize,
    bits: u32,
    block: usize,
}

impl Op for MatMulNBits {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let a = cx.to_gpu(req(inputs, 0)?)?;
        let b_v = req(inputs, 1)?;
        let (b_shape, b_dtype) = (b_v.shape().to_vec(), b_v.dtype());
        let b_parts = parts(cx, b_v)?;
        let scales = cx.to_gpu(req(inputs, 2)?)?;
        let zp = opt_gpu(cx, inputs, 3)?;
        if inputs.get(4).copied().flatten().is_some() {
            return Err(op_err("g_idx is not supported"));
        }
        let bias = opt_gpu(cx, inputs, 5)?;
        let (k, n) = (self.k, self.n);
        if a.shape.last() != Some(&k) {
            return Err(op_err(format!(
                "A shape {:?} does not end with K={k}",
                a.shape
            )));
        }
        let nb = k.div_ceil(self.block);
        let blob = self.block * self.bits as usize / 8;
        if b_dtype != DType::U8 || numel(&b_shape) != n * nb * blob {
            return Err(op_err(format!(
                "B {b_shape:?} {} is not [N={n}, {nb}, {blob}] uint8",
                b_dtype.name()
            )));
        }
        if scales.numel() != n * nb {
            return Err(op_err(format!(
                "scales has {} elements, expected {}",
                scales.numel(),
                n * nb
            )));
        }
        let m = a.numel() / k;
        let mut out_shape = a.shape.clone();
        if let Some(last) = out_shape.last_mut() {
            *last = n;
        }
        // Prefill with f16 activations writes f16 itself (no f32 result and Cast) when every
        // part's columns pair up.
        let direct_f16 = m > 1
            && a.dtype == DType::F16
            && n.is_multiple_of(2)
            && b_parts.iter().all(|(off, b)| {
                off.is_multiple_of(2) && b.shape.first().is_some_and(|p| p.is_multiple_of(2))
            });
        let y_dtype = if direct_f16 { DType::F16 } else { DType::F32 };
        let y = cx.alloc(y_dtype, out_shape)?;
        let zrow = (nb * self.bits as usize).div_ceil(8);
        // GEMV (decode): TPC threads per output column split its blocks, 64 / TPC columns per
        // workgroup.
        let tpc = tpc_of(nb);
        // Software adapters: the register-block GEMM (R x C per invocation, no workgroup
        // memory) when the weights are 4-bit and words never straddle K or a block.
        let regs = (m > 1
            && cx.gpu.tuning.software
            && self.bits == 4
            && k.is_multiple_of(8)
            && self.block.is_multiple_of(8))
        .then(|| regs_shape(m));
        let io = NBitsIo {
            bits: self.bits,
            block: self.block as u32,
            a: a.storage(),
            scales: scales.storage(),
            zp: zp.as_ref().map(GpuTensor::storage),
            bias: bias.as_ref().map(GpuTensor::storage),
            y: y.storage(),
        };
        // The kernel is the same for every weight part; each part only has its own grid,
        // bindings and sizes.
        let (kern, shape) = if m == 1 {
            let nibbles = self.bits == 4 && k.is_multiple_of(8);
            let kern = cx.gpu.kernel(&GemvSpec { io, tpc, nibbles })?;
            (kern, Shape::Gemv)
        } else if let Some((r, c)) = regs {
            (cx.gpu.kernel(&RegsSpec { io, r, c })?, Shape::Regs(r, c))
        } else {
            // Tiled GEMM (prefill): TM = 4 * TMR rows by 64 columns per workgroup of
            // 16 / CQ * TMR invocations.
            let tmr: u32 = match m {
                0..=4 => 1,
                5..=8 => 2,
                9..=16 => 4,
                17..=32 => 8,
                _ => 16,
            };
            let tk = self.block.min(32) as u32;
            (
                cx.gpu.kernel(&TiledSpec { io, tmr, tk })?,
                Shape::Tiled(tmr),
            )
        };
        for (n_off, b) in &b_parts {
            let n_part = b.shape.first().copied().unwrap_or(0);
            let bound = kern
                .bind("a", &a)
                .bind("qw", b)
                .bind("scales", &scales)
                .bind_opt("zp", zp.as_ref())
                .bind_opt("bias", bias.as_ref())
                .bind("y", &y);
            let p = NBitsParams {
                m: m as u32,
                n: n as u32,
                k: k as u32,
                blocks: nb as u32,
                zp_row: zrow as u32,
                n_off: *n_off as u32,
                n_part: n_part as u32,
            };
            match shape {
                Shape::Gemv => {
                    let cols = n_part.div_ceil((64 / tpc) as usize) as u64;
                    cx.launch(bound, &p, cols * 64)?;
                }
                Shape::Regs(r, c) => {
                    let blocks = m.div_ceil(r as usize) * n_part.div_ceil(c as usize);
                    cx.launch(bound, &p, blocks as u64)?;
                }
                Shape::Tiled(tmr) => {
                    let grid = (
                        n_part.div_ceil(64) as u32,
                        m.div_ceil(4 * tmr as usize) as u32,
                    );
                    cx.launch_groups(bound, &p, grid)?;
                }
            }
        }
        let out = if a.dtype == y.dtype {
            y
        } else {
            cast_gpu(cx, &y, a.dtype)?
        };
        Ok(vec![Value::Gpu(out)])
    }
}

fn matmul_nbits(a: &Attrs<'_>) -> Result<Box<dyn Op>> {
    let k = a.i("K").ok_or_else(|| a.err("missing K"))?;
    let n = a.i("N").ok_or_else(|| a.err("missing N"))?;
    let bits = a.i_or("bits", 4);
    let block = a
        .i("block_size")
        .ok_or_else(|| a.err("missing block_size"))?;
    if bits != 4 && bits != 8 {
        return Err(a.err(format!("bits={bits} is not supported (4 or 8)")));
    }
    if !(16..=256).contains(&block) || !(block as u64).is_power_of_two() {
        return Err(a.err(format!(
            "block_size={block} is not supported (power of two, 16..256)"
        )));
    }
    if k <= 0 || n <= 0 {
        return Err(a.err("K and N must be positive"));
    }
    if a.node.inputs.get(4).is_some_and(|s| !s.is_empty()) {
        return Err(a.err("g_idx input is not supported"));
    }
    // accuracy_level (0 unset, 1 f32, 2 f16, 3 bf16, 4 int8) lets ONNX Runtime compute with
    // activations quantised to that precision. It is read and ignored: the weights are always
    // dequantised exactly and the products accumulated in f32, which is at least as accurate as
    // every level (with 4, ONNX Runtime's own results differ from the exact ones by its int8
    // rounding of the activations).
    let level = a.i_or("accuracy_level", 0);
    if !(0..=4).contains(&level) {
        return Err(a.err(format!("accuracy_level={level} is not 0..4")));
    }
    Ok(Box::new(MatMulNBits {
        k: k as usize,
        n: n as usize,
        bits: bits as u32,
        block: block as usize,
    }))
}

crate::gpu_params! {
    /// GatherBlockQuantized's parameters: the sizes, and the row range a dispatch writes with
    /// the first rows of the data, scale and zero point parts it binds.
    struct GbqParams {
        /// Elements of y.
        n: u32,
        /// Row length (values).
        k: u32,
        /// Rows of the table.
        rows: u32,
        /// Quant blocks per row.
        blocks: u32,
        /// Bytes of data per row.
        data_row: u32,
        /// Bytes of packed uint8 zero points per row.
        zp_row: u32,
        /// The data part's first row.
        data_row0: u32,
        /// The first row written.
        lo: u32,
        /// The end of the rows written.
        hi: u32,
        /// The scale part's first row.
        scales_row0: u32,
        /// The zero point part's first row.
        zp_row0: u32,
    }
}

/// `gather_block_quantized.wgsl`: the attributes and the storages of the indices, scales,
/// zero points (`None`: the default) and result.
#[derive(Hash)]
struct GbqSpec {
    bits: u32,
    block: u32,
    idx: Storage,
    scales: Storage,
    zp: Option<Storage>,
    y: Storage,
}

impl crate::gpu::KernelSpec for GbqSpec {
    const NAME: &'static str = "gather_block_quantized";
    const WGSL: &'static [&'static str] = &[GBQ];
    fn build(&self, _: &crate::gpu::Features) -> Kernel {
        let zp_code = zp_code(self.zp, self.bits).replace("n * ", "row * ");
        let kern = Kernel::new("gather_block_quantized", GBQ)
            .params::<GbqParams>()
            .u32("BITS", self.bits)
            .u32("BLOCK", self.block)
            .code("ZP", &zp_code)
            .input("data", Storage::U8)
            .input("idx", self.idx)
            .input("scales", self.scales);
        match self.zp {
            Some(z) => kern.input("zp", z),
            None => kern,
        }
        .output("y", self.y)
    }
}

struct GatherBlockQuantized {
    bits: u32,
    block: usize,
}

impl Op for GatherBlockQuantized {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let data_v = req(inputs, 0)?;
        let (data_shape, data_dtype) = (data_v.shape().to_vec(), data_v.dtype());
        let data_parts = parts(cx, data_v)?;
        if let Some(&rows) = data_shape.first() {
            super::check_host_indices(req(inputs, 1)?, rows, "index")?;
        }
        let idx = cx.to_gpu(req(inputs, 1)?)?;
        // Scales and zero points may be split by rows across buffers too (a large table's
        // scales pass the binding limit after its data does: E2B's per-layer table, 262144 x
        // 280 f32 scales, on lavapipe's 128 MiB), at their own row boundaries.
        let scale_parts = parts(cx, req(inputs, 2)?)?;
        let zp_parts = match inputs.get(3).copied().flatten() {
            Some(v) => Some(parts(cx, v)?),
            None => None,
        };
        let scales = &scale_parts[0].1;
        let zp = zp_parts.as_ref().map(|p| p[0].1.clone());
        if data_shape.len() != 2 || data_dtype != DType::U8 {
            return Err(op_err(format!(
                "data must be a 2-D uint8 matrix, got {data_shape:?} {}",
                data_dtype.name()
            )));
        }
        let rows = data_shape[0];
        let k = data_shape[1] * 8 / self.bits as usize;
        let nb = k.div_ceil(self.block);
        let scales_v = req(inputs, 2)?;
        if scales_v.numel() != rows * nb {
            return Err(op_err(format!(
                "scales {:?} is not [{rows}, {nb}]",
                scales_v.shape()
            )));
        }
        let zp_v = inputs.get(3).copied().flatten();
        // A split tensor's parts are row ranges of its first dimension: rows of the table only
        // when it is 2-D.
        if (scale_parts.len() > 1 && scales_v.shape().len() != 2)
            || (zp_parts.as_ref().is_some_and(|p| p.len() > 1)
                && zp_v.is_some_and(|z| z.shape().len() != 2 || z.shape()[0] != rows))
            || (scale_parts.len() > 1 && scales_v.shape()[0] != rows)
        {
            return Err(op_err(
                "scales or zero points split across buffers must be [rows, ...] matrices",
            ));
        }
        let mut shape = idx.shape.clone();
        shape.push(k);
        let y = cx.alloc(scales.dtype, shape)?;
        if y.dtype == DType::F16 && k % 2 == 1 {
            return Err(op_err("float16 output needs an even row length"));
        }
        let zrow = (nb * self.bits as usize).div_ceil(8);
        let kern = cx.gpu.kernel(&GbqSpec {
            bits: self.bits,
            block: self.block as u32,
            idx: idx.storage(),
            scales: scales.storage(),
            zp: zp.as_ref().map(GpuTensor::storage),
            y: y.storage(),
        })?;
        // One dispatch per row range over which the data, scale and zero point parts do not
        // change (one range for unsplit tensors).
        let mut cuts: Vec<usize> = data_parts
            .iter()
            .chain(&scale_parts)
            .chain(zp_parts.iter().flatten())
            .map(|(r0, _)| *r0)
            .chain([rows])
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let part_at = |ps: &[(usize, GpuTensor)], r: usize| {
            ps.iter()
                .rev()
                .find(|(r0, _)| *r0 <= r)
                .or(ps.first())
                .cloned()
                .expect("a tensor has a part")
        };
        for w in cuts.windows(2) {
            let (lo, hi) = (w[0], w[1]);
            if lo >= rows {
                break;
            }
            let (d0, data) = part_at(&data_parts, lo);
            let (s0, sc) = part_at(&scale_parts, lo);
            let z = zp_parts.as_ref().map(|p| part_at(p, lo));
            let bound = kern
                .bind("data", &data)
                .bind("idx", &idx)
                .bind("scales", &sc)
                .bind_opt("zp", z.as_ref().map(|(_, t)| t))
                .bind("y", &y);
            let n = y.numel();
            let p = GbqParams {
                n: n as u32,
                k: k as u32,
                rows: rows as u32,
                blocks: nb as u32,
                data_row: data_shape[1] as u32,
                zp_row: zrow as u32,
                data_row0: d0 as u32,
                lo: lo as u32,
                hi: hi as u32,
                scales_row0: s0 as u32,
                zp_row0: z.as_ref().map_or(0, |(z0, _)| *z0 as u32),
            };
            cx.launch_mapped(bound, &p, n, &y)?;
        }
        Ok(vec![Value::Gpu(y)])
    }
}

fn gather_block_quantized(a: &Attrs<'_>) -> Result<Box<dyn Op>> {
    let bits = a.i_or("bits", 4);
    let block = a.i_or("block_size", 128);
    if a.i_or("gather_axis", 0) != 0 {
        return Err(a.err("only gather_axis=0 is supported"));
    }
    let qa = a.i_or("quantize_axis", 1);
    if qa != 1 && qa != -1 {
        return Err(a.err("only quantize_axis=1 (last) is supported"));
    }
    if bits != 4 && bits != 8 {
        return Err(a.err(format!("bits={bits} is not supported")));
    }
    if block < 16 || !(block as u64).is_power_of_two() {
        return Err(a.err(format!("block_size={block} is not supported")));
    }
    Ok(Box::new(GatherBlockQuantized {
        bits: bits as u32,
        block: block as usize,
    }))
}

/// Registers the family.
pub fn register(r: &mut Registry) {
    r.register(MS, "MatMulNBits", matmul_nbits);
    r.register(MS, "GatherBlockQuantized", gather_block_quantized);
}
