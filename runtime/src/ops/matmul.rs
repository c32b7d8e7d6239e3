//! MatMul and Gemm (f32 accumulation; f16 inputs unpacked in the shader).

use super::elementwise::cast_gpu;
use super::host;
use super::{Attrs, Op, Registry, req};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor, Value};
use crate::gpu::{Features, Kernel, KernelSpec, Storage};
use crate::tensor::DType;

const GEMM: &str = include_str!("../kernels/matmul/gemm.wgsl");
const GEMM_TILED: &str = include_str!("../kernels/matmul/gemm_tiled.wgsl");

/// Strided operand: element (m, k) at `off + m*rs + k*cs`.
struct Operand<'a> {
    t: &'a GpuTensor,
    rs: usize,
    cs: usize,
    bstrides: Vec<usize>,
}

/// The most batch dimensions of a GEMM ([`GemmParams`]'s arrays).
const GEMM_RANK: usize = 16;

crate::gpu_params! {
    /// The GEMM kernels' parameters (`gemm.wgsl`, `gemm_tiled.wgsl`): `y[b, m, n] = ALPHA *
    /// sum_k A[a_off(b) + m*ars + k*acs] * B[b_off(b) + k*brs + n*bcs] + BETA * C[m*crs + n*ccs]`.
    struct GemmParams {
        /// Output elements.
        n: u32,
        /// M.
        rows: u32,
        /// N.
        cols: u32,
        /// K.
        k: u32,
        /// Batch dimensions (`bshape`, `a_bstrides`, `b_bstrides` entries used).
        brank: u32,
        ars: u32,
        acs: u32,
        brs: u32,
        bcs: u32,
        crs: u32,
        ccs: u32,
        /// Row tiles per batch entry (the tiled kernel's grid y is `batch * row_tiles`).
        row_tiles: u32,
        /// The batch shape.
        bshape: [u32; GEMM_RANK],
        /// A's and B's offsets per batch index (elements).
        a_bstrides: [u32; GEMM_RANK],
        b_bstrides: [u32; GEMM_RANK],
    }
}

/// The one-output-per-invocation GEMM (`gemm.wgsl`): operand storages, `alpha` and (with C)
/// `beta` (bits) baked in.
#[derive(Hash, Clone, Copy)]
struct GemmSpec {
    a: Storage,
    b: Storage,
    c: Option<Storage>,
    alpha: u32,
    beta: u32,
    y: Storage,
}

impl GemmSpec {
    /// The code both GEMM kernels share: `ALPHA`, the operands, `ADD_C` and the output.
    fn operands(&self, kern: Kernel) -> Kernel {
        let kern = kern
            .params::<GemmParams>()
            .f32("ALPHA", f32::from_bits(self.alpha))
            .input("a", self.a)
            .input("b", self.b);
        let kern = match self.c {
            Some(c) => kern.input("c", c).code(
                "ADD_C",
                &format!(
                    "r = r + bitcast<f32>({}u) * ld_c(row * prm.crs + col * prm.ccs);",
                    self.beta
                ),
            ),
            None => kern.code("ADD_C", ""),
        };
        kern.output("y", self.y)
    }
}

impl KernelSpec for GemmSpec {
    const NAME: &'static str = "gemm";
    const WGSL: &'static [&'static str] = &[GEMM];
    fn build(&self, _: &Features) -> Kernel {
        self.operands(Kernel::new("gemm", GEMM)).mapped("y")
    }
}

/// The tiled GEMM (`gemm_tiled.wgsl`, M > 1, f32 output): [`GemmSpec`]'s values and the rows
/// per invocation `rm`.
#[derive(Hash)]
struct GemmTiledSpec {
    gemm: GemmSpec,
    rm: u32,
}

impl KernelSpec for GemmTiledSpec {
    const NAME: &'static str = "gemm_tiled";
    const WGSL: &'static [&'static str] = &[GEMM_TILED];
    fn build(&self, _: &Features) -> Kernel {
        // f16 results (N even): each invocation's RM x 4 block into the B tile's memory (free
        // after the last barrier of the K loop; TM x TN <= 32 x 64 floats), then word stores.
        let (store, tile) = if self.gemm.y == Storage::F16 {
            (
                "Bs[(tm + 8u * i) * TN + tn + 16u * j] = r;",
                "workgroupBarrier();
    for (var e = tid; e < TM * TN / 2u; e = e + 128u) {
        let r = e / (TN / 2u);
        let c = 2u * (e % (TN / 2u));
        let row = m0 + r;
        let col = n0 + c;
        if (row < M && col < N) {
            st_y(((bi * M + row) * N + col) / 2u, Bs[r * TN + c], Bs[r * TN + c + 1u]);
        }
    }",
            )
        } else {
            ("stf_y((bi * M + row) * N + col, r);", "")
        };
        let kern = Kernel::new("gemm_tiled", GEMM_TILED)
            .workgroup(128)
            .u32("RM", self.rm)
            .u32("A_LEN", 32 * 8 * self.rm)
            .code("STORE", store)
            .code("STORE_TILE", tile);
        self.gemm.operands(kern)
    }
}

#[allow(clippy::too_many_arguments)] // reason: a GEMM is described by this many independent parameters
fn gemm(
    cx: &mut Ctx<'_>,
    a: Operand<'_>,
    b: Operand<'_>,
    c: Option<(&GpuTensor, usize, usize)>,
    batch: &[usize],
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    beta: f32,
    out_shape: Vec<usize>,
) -> Result<GpuTensor> {
    let dtype = a.t.dtype;
    let rm: u32 = match m {
        0..=8 => 1,
        9..=16 => 2,
        _ => 4,
    };
    let batches: usize = batch.iter().product();
    let row_tiles = m.div_ceil(8 * rm as usize);
    // M > 1: the tiled kernel (f32 output, or f16 for an even N; otherwise a cast after);
    // M == 1 (or a grid beyond the limits): one output per invocation.
    let tiled = m > 1
        && k > 0
        && n > 0
        && batches * row_tiles <= cx.gpu.limits.max_compute_workgroups_per_dimension as usize;
    let tiled_dtype = if dtype == DType::F16 && n.is_multiple_of(2) {
        DType::F16
    } else {
        DType::F32
    };
    let out = cx.alloc(if tiled { tiled_dtype } else { dtype }, out_shape)?;
    let total = out.numel();
    if total == 0 {
        return if out.dtype != dtype {
            cast_gpu(cx, &out, dtype)
        } else {
            Ok(out)
        };
    }
    if batch.len() > GEMM_RANK {
        return Err(op_err(format!(
            "GEMM takes up to {GEMM_RANK} batch dimensions, not {}",
            batch.len()
        )));
    }
    let (crs, ccs) = c.map_or((0, 0), |(_, crs, ccs)| (crs, ccs));
    let mut p = GemmParams {
        n: total as u32,
        rows: m as u32,
        cols: n as u32,
        k: k as u32,
        brank: batch.len() as u32,
        ars: a.rs as u32,
        acs: a.cs as u32,
        brs: b.rs as u32,
        bcs: b.cs as u32,
        crs: crs as u32,
        ccs: ccs as u32,
        row_tiles: if tiled { row_tiles as u32 } else { 0 },
        ..GemmParams::default()
    };
    for (d, &s) in batch.iter().enumerate() {
        p.bshape[d] = s as u32;
    }
    for (d, &s) in a.bstrides.iter().enumerate() {
        p.a_bstrides[d] = s as u32;
    }
    for (d, &s) in b.bstrides.iter().enumerate() {
        p.b_bstrides[d] = s as u32;
    }
    let spec = GemmSpec {
        a: a.t.storage(),
        b: b.t.storage(),
        c: c.map(|(ct, ..)| ct.storage()),
        alpha: alpha.to_bits(),
        beta: if c.is_some() { beta.to_bits() } else { 0 },
        y: out.storage(),
    };
    let ct = c.map(|(ct, ..)| ct);
    if !tiled {
        let kern = cx.gpu.kernel(&spec)?;
        let bound = kern
            .bind("a", a.t)
            .bind("b", b.t)
            .bind_opt("c", ct)
            .bind("y", &out);
        cx.launch_mapped(bound, &p, total, &out)?;
        return Ok(out);
    }
    let kern = cx.gpu.kernel(&GemmTiledSpec { gemm: spec, rm })?;
    let bound = kern
        .bind("a", a.t)
        .bind("b", b.t)
        .bind_opt("c", ct)
        .bind("y", &out);
    cx.launch_groups(
        bound,
        &p,
        (n.div_ceil(64) as u32, (batches * row_tiles) as u32),
    )?;
    if out.dtype == dtype {
        Ok(out)
    } else {
        cast_gpu(cx, &out, dtype)
    }
}

/// `a @ b` with numpy MatMul semantics (1-D promotion, broadcast batch dims).
pub fn matmul_gpu(cx: &mut Ctx<'_>, a: &GpuTensor, b: &GpuTensor) -> Result<GpuTensor> {
    let a_shape = if a.shape.len() == 1 {
        vec![1, a.shape[0]]
    } else {
        a.shape.clone()
    };
    let b_shape = if b.shape.len() == 1 {
        vec![b.shape[0], 1]
    } else {
        b.shape.clone()
    };
    let (ar, brk) = (a_shape.len(), b_shape.len());
    let (m, k) = (a_shape[ar - 2], a_shape[ar - 1]);
    let (k2, n) = (b_shape[brk - 2], b_shape[brk - 1]);
    if k != k2 {
        return Err(op_err(format!(
            "MatMul inner dimensions differ: {:?} x {:?}",
            a.shape, b.shape
        )));
    }
    let batch = host::broadcast(&[&a_shape[..ar - 2], &b_shape[..brk - 2]])?;
    let a_b: Vec<usize> = host::bcast_strides(&a_shape[..ar - 2], &batch)
        .iter()
        .map(|&s| s as usize * m * k)
        .collect();
    let b_b: Vec<usize> = host::bcast_strides(&b_shape[..brk - 2], &batch)
        .iter()
        .map(|&s| s as usize * k * n)
        .collect();
    let mut out_shape = batch.clone();
    if a.shape.len() > 1 {
        out_shape.push(m);
    }
    if b.shape.len() > 1 {
        out_shape.push(n);
    }
    let ao = Operand {
        t: a,
        rs: k,
        cs: 1,
        bstrides: a_b,
    };
    let bo = Operand {
        t: b,
        rs: n,
        cs: 1,
        bstrides: b_b,
    };
    gemm(cx, ao, bo, None, &batch, m, n, k, 1.0, 0.0, out_shape)
}

struct MatMul;
impl Op for MatMul {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let a = cx.to_gpu(req(inputs, 0)?)?;
        let b = cx.to_gpu(req(inputs, 1)?)?;
        Ok(vec![Value::Gpu(matmul_gpu(cx, &a, &b)?)])
    }
}

struct Gemm {
    alpha: f32,
    beta: f32,
    ta: bool,
    tb: bool,
}

impl Op for Gemm {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let a = cx.to_gpu(req(inputs, 0)?)?;
        let b = cx.to_gpu(req(inputs, 1)?)?;
        if a.shape.len() != 2 || b.shape.len() != 2 {
            return Err(op_err("Gemm inputs must be 2-D"));
        }
        let (m, k) = if self.ta {
            (a.shape[1], a.shape[0])
        } else {
            (a.shape[0], a.shape[1])
        };
        let (k2, n) = if self.tb {
            (b.shape[1], b.shape[0])
        } else {
            (b.shape[0], b.shape[1])
        };
        if k != k2 {
            return Err(op_err(format!(
                "Gemm inner dimensions differ: {:?} x {:?}",
                a.shape, b.shape
            )));
        }
        let ao = if self.ta {
            Operand {
                t: &a,
                rs: 1,
                cs: m,
                bstrides: vec![],
            }
        } else {
            Operand {
                t: &a,
                rs: k,
                cs: 1,
                bstrides: vec![],
            }
        };
        let bo = if self.tb {
            Operand {
                t: &b,
                rs: 1,
                cs: k,
                bstrides: vec![],
            }
        } else {
            Operand {
                t: &b,
                rs: n,
                cs: 1,
                bstrides: vec![],
            }
        };
        let c = match inputs.get(2).copied().flatten() {
            Some(v) => Some(cx.to_gpu(v)?),
            None => None,
        };
        let c_desc = match &c {
            Some(ct) => {
                let st = host::bcast_strides(&ct.shape, &[m, n]);
                let _ = host::broadcast(&[&ct.shape, &[m, n]])?;
                Some((ct, st[0] as usize, st[1] as usize))
            }
            None => None,
        };
        Ok(vec![Value::Gpu(gemm(
            cx,
            ao,
            bo,
            c_desc,
            &[],
            m,
            n,
            k,
            self.alpha,
            self.beta,
            vec![m, n],
        )?)])
    }
}

fn gemm_b(a: &Attrs<'_>) -> Result<Box<dyn Op>> {
    Ok(Box::new(Gemm {
        alpha: a.f_or("alpha", 1.0),
        beta: a.f_or("beta", 1.0),
        ta: a.i_or("transA", 0) != 0,
        tb: a.i_or("transB", 0) != 0,
    }))
}

/// Registers the family.
pub fn register(r: &mut Registry) {
    r.register("", "MatMul", |_| Ok(Box::new(MatMul)));
    r.register("", "Gemm", gemm_b);
}
