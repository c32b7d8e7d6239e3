//! `Concat(Unsqueeze(Mul(Gather(T_j, ids), s_j), a) for j in 0..L, axis a)`: L embedding tables
//! read at the same ids, each times its scale, stacked on a new axis before the rows' axis — the
//! per-layer inputs of Gemma 4 as mobius writes them for WebGPU when the fused [V, L * D] table
//! passes the 256 MiB buffer limit (one [V, D] table per layer, in the decoder; Gemma 4 E2B's 35
//! tables of 128 MiB in float16). Unfused that is L `Gather`s, L `Mul`s and a `Concat` (the
//! `Unsqueeze`s are views); fused, the lookups write their slots of the stacked result directly,
//! as many tables per dispatch as the adapter lets one kernel bind. Tables are 2-D initializers
//! of one shape and dtype (f32 or f16), scales scalar float initializers (or no `Mul`: scale 1).
//! A table split across buffers (above the binding limit), ids of another rank than the axis
//! says, or an odd row length for f16 run the original nodes.

use super::rewrite::{Find, claim_each};
use super::{FastPath, Graphs, external_inputs, fused_group};
use crate::error::Result;
use crate::exec::{Ctx, Value};
use crate::gpu::{Kernel, Storage};
use crate::model::Node;
use crate::ops::Op;
use crate::tensor::DType;

const LAYER_LOOKUPS: &str = include_str!("../kernels/fuse/layer_lookups.wgsl");

/// Tables one dispatch reads at most (the scales are a parameter array of this length).
const MAX_TABLES: usize = 8;

pub(super) struct Pattern {
    /// Every Gather, Mul and Unsqueeze, then the Concat (graph order).
    pub nodes: Vec<usize>,
    tables: Vec<String>,
    /// One per table (`None`: no `Mul`).
    scales: Vec<Option<String>>,
    ids: String,
    /// The stacking axis as written (Unsqueeze's and Concat's).
    axis: i64,
    out: String,
}

impl Graphs<'_> {
    /// The lookup under `v` (read only by `unsq`, an Unsqueeze on `axis`): `Mul(Gather(T, ids),
    /// s)` or `Gather(T, ids)`; its nodes, table, scale and ids.
    fn scaled_lookup(
        &self,
        v: &str,
        unsq: usize,
    ) -> Option<(Vec<usize>, String, Option<String>, String)> {
        if !self.only_for(v, unsq) {
            return None;
        }
        let p = *self.producer.get(v)?;
        let (gather, mul, scale) = if self.is(p, "", "Mul") {
            if !self.plain(p, 2) {
                return None;
            }
            let mi = &self.node(p).inputs;
            let (gi, si) = if self.producer_of(&mi[0], "", "Gather").is_some() {
                (0, 1)
            } else {
                (1, 0)
            };
            if mi[0] == mi[1] || !self.scalar_init(&mi[si]) || !self.only_for(&mi[gi], p) {
                return None;
            }
            (
                self.producer_of(&mi[gi], "", "Gather")?,
                Some(p),
                Some(mi[si].clone()),
            )
        } else {
            (p, None, None)
        };
        if !self.is(gather, "", "Gather")
            || !self.plain(gather, 2)
            || self.attrs(gather).i_or("axis", 0) != 0
        {
            return None;
        }
        let gin = &self.node(gather).inputs;
        let table = self.inits.get(gin[0].as_str())?;
        if table.shape.len() != 2
            || !matches!(table.dtype, DType::F32 | DType::F16)
            || gin[1] == gin[0]
        {
            return None;
        }
        let nodes = std::iter::once(gather).chain(mul).collect();
        Some((nodes, gin[0].clone(), scale, gin[1].clone()))
    }

    /// The pattern whose Concat is node `c`.
    fn layer_lookups(&self, c: usize) -> Option<Pattern> {
        if !self.is(c, "", "Concat") || self.node(c).outputs.len() != 1 {
            return None;
        }
        let ins = &self.node(c).inputs;
        let axis = self.attrs(c).i("axis")?;
        if ins.len() < 2 || ins.iter().any(String::is_empty) {
            return None;
        }
        let (mut nodes, mut tables, mut scales, mut ids) =
            (Vec::new(), Vec::new(), Vec::new(), None);
        let mut shape: Option<(&[usize], DType)> = None;
        for (j, v) in ins.iter().enumerate() {
            // each input read once (a Concat of one value twice is no stack of lookups)
            if ins[..j].contains(v) || !self.only_for(v, c) {
                return None;
            }
            let u = self.producer_of(v, "", "Unsqueeze")?;
            let n = self.node(u);
            let axes = if n.inputs.len() == 2 {
                self.constant(&n.inputs[1])?.to_i64()
            } else if n.inputs.len() == 1 {
                self.attrs(u).ints("axes")?
            } else {
                return None;
            };
            if axes != [axis] || n.outputs.len() != 1 {
                return None;
            }
            let (mut group, table, scale, id) = self.scaled_lookup(&n.inputs[0], u)?;
            if *ids.get_or_insert_with(|| id.clone()) != id {
                return None;
            }
            let t = self.inits.get(table.as_str())?;
            let (s, d) = *shape.get_or_insert((t.shape.as_slice(), t.dtype));
            if t.shape != s || t.dtype != d {
                return None;
            }
            nodes.append(&mut group);
            nodes.push(u);
            tables.push(table);
            scales.push(scale);
        }
        nodes.push(c);
        nodes.sort_unstable();
        Some(Pattern {
            nodes,
            tables,
            scales,
            ids: ids?,
            axis,
            out: self.node(c).outputs[0].clone(),
        })
    }
}

/// The stacked lookups among the nodes not claimed yet.
pub(super) fn find(cx: &mut Find<'_>) -> Vec<Pattern> {
    claim_each(cx, |g, c| g.layer_lookups(c), |p| &p.nodes)
}

crate::gpu_params! {
    /// [`LayerLookups`]'s parameters for one dispatch.
    struct LayerLookupsParams {
        /// Elements this dispatch computes: tokens * count * row_len.
        n: u32,
        /// The tables' row length (D).
        row_len: u32,
        /// The tables' rows (P).
        rows: u32,
        /// Tables in the result (L).
        slots: u32,
        /// The first table of this dispatch.
        first: u32,
        /// Tables of this dispatch.
        count: u32,
        pad0: u32,
        pad1: u32,
        /// The scales of this dispatch's tables.
        scales: [f32; MAX_TABLES],
    }
}

/// `layer_lookups.wgsl` for `count` tables of one storage.
#[derive(Hash)]
struct LayerLookupsSpec {
    count: usize,
    table: Storage,
    ids: Storage,
    y: Storage,
}

impl crate::gpu::KernelSpec for LayerLookupsSpec {
    const NAME: &'static str = "layer_lookups";
    const WGSL: &'static [&'static str] = &[LAYER_LOOKUPS];
    fn build(&self, _: &crate::gpu::Features) -> Kernel {
        let lookup: String = (0..self.count)
            .map(|j| format!("if (j == {j}u) {{ v = ld_t{j}(at); }}\n    "))
            .collect();
        let mut k = Kernel::new("layer_lookups", LAYER_LOOKUPS)
            .params::<LayerLookupsParams>()
            .code("LOOKUP", &lookup);
        for j in 0..self.count {
            k = k.input(&format!("t{j}"), self.table);
        }
        k.input("ids", self.ids).output("y", self.y)
    }
}

/// The fused op. Inputs: the ids, the tables, then the scales present and the Unsqueeze axes
/// (the unfused nodes read them; the kernel takes the scales' values, read at load).
pub(super) struct LayerLookups {
    axis: i64,
    /// Each table's scale (1 without a `Mul`).
    scales: Vec<f32>,
}

impl FastPath for LayerLookups {
    fn fast(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Option<Vec<Value>>> {
        let l = self.scales.len();
        let Some(ids) = inputs.first().copied().flatten() else {
            return Ok(None);
        };
        let tables: Option<Vec<&Value>> =
            (1..=l).map(|i| inputs.get(i).copied().flatten()).collect();
        let Some(tables) = tables else {
            return Ok(None);
        };
        let scales = &self.scales;
        let (dtype, shape) = (tables[0].dtype(), tables[0].shape().to_vec());
        let rank = ids.shape().len() as i64;
        // the stacking axis of the rank + 2 result must sit just before the rows' axis
        let axis = if self.axis < 0 {
            self.axis + rank + 2
        } else {
            self.axis
        };
        if shape.len() != 2
            || axis != rank
            || !matches!(ids.dtype(), DType::I64 | DType::I32)
            || !matches!(dtype, DType::F32 | DType::F16)
            || tables
                .iter()
                .any(|t| t.dtype() != dtype || t.shape() != shape.as_slice())
            || (dtype == DType::F16 && shape[1] % 2 == 1)
        {
            return Ok(None);
        }
        let (p, d) = (shape[0], shape[1]);
        crate::ops::check_host_indices(ids, p, "index")?;
        let mut gpu_tables = Vec::with_capacity(l);
        for t in &tables {
            let g = cx.to_gpu(t)?;
            if g.split.is_some() {
                return Ok(None);
            }
            gpu_tables.push(g);
        }
        let ids = cx.to_gpu(ids)?;
        let tokens = ids.numel();
        let mut out_shape = ids.shape.clone();
        out_shape.extend([l, d]);
        let y = cx.alloc(dtype, out_shape)?;
        // ids and y besides the tables
        let per = (cx.gpu.max_bindings() as usize)
            .saturating_sub(2)
            .clamp(1, MAX_TABLES);
        if tokens > 0 && d > 0 {
            for first in (0..l).step_by(per) {
                let count = per.min(l - first);
                let k = cx.gpu.kernel(&LayerLookupsSpec {
                    count,
                    table: gpu_tables[0].storage(),
                    ids: ids.storage(),
                    y: y.storage(),
                })?;
                let mut params = LayerLookupsParams {
                    n: (tokens * count * d) as u32,
                    row_len: d as u32,
                    rows: p as u32,
                    slots: l as u32,
                    first: first as u32,
                    count: count as u32,
                    ..Default::default()
                };
                params.scales[..count].copy_from_slice(&scales[first..first + count]);
                let mut bound = k.bind("ids", &ids).bind("y", &y);
                for (j, t) in gpu_tables[first..first + count].iter().enumerate() {
                    bound = bound.bind(&format!("t{j}"), t);
                }
                cx.launch_mapped(bound, &params, tokens * count * d, &y)?;
            }
        }
        Ok(Some(vec![Value::Gpu(y)]))
    }
}

/// The fused node and op for `p`.
pub(super) fn build(
    g: &Graphs<'_>,
    p: Pattern,
    ops: &mut [Option<Box<dyn Op>>],
) -> Option<(Node, Box<dyn Op>, String)> {
    let l = p.tables.len();
    let mut ext = vec![p.ids.clone()];
    ext.extend(p.tables.iter().cloned());
    ext.extend(p.scales.iter().flatten().cloned());
    // and whatever else the nodes read (the Unsqueeze axes)
    for v in external_inputs(g, &p.nodes) {
        if !ext.contains(&v) {
            ext.push(v);
        }
    }
    let muls = p.scales.iter().flatten().count();
    let kind = if muls == l {
        format!("Fused[{l}x(Gather+Mul+Unsqueeze)+Concat]")
    } else if muls == 0 {
        format!("Fused[{l}x(Gather+Unsqueeze)+Concat]")
    } else {
        format!("Fused[{l}x(Gather+Unsqueeze)+{muls}xMul+Concat]")
    };
    let scales = p
        .scales
        .iter()
        .map(|s| match s {
            None => Some(1.0),
            Some(s) => g.constant(s).map(|t| t.to_f32()[0]),
        })
        .collect::<Option<Vec<f32>>>()?;
    let op = LayerLookups {
        axis: p.axis,
        scales,
    };
    Some(fused_group(
        g,
        &p.nodes,
        ext,
        vec![p.out.clone()],
        ops,
        kind,
        op,
    ))
}
