//! The op registry. One module per op family; each registers `(domain, op) -> builder`, and each
//! builder parses and validates its own attributes when the model is loaded.

use crate::error::{Error, Result, Unsupported};
use crate::exec::{Ctx, GpuTensor, Value};
use crate::model::{Graph, Node};
use crate::proto;
use crate::tensor::{DType, HostTensor};
use std::collections::HashMap;

pub mod attention;
pub mod elementwise;
pub mod host;
pub mod matmul;
pub mod movement;
pub mod norm;
pub mod quant;
pub mod reduce;
pub use attention::sdpa;
pub mod shape;

/// Microsoft contrib domain.
pub const MS: &str = "com.microsoft";

/// A built, attribute-validated op.
pub trait Op {
    /// Input positions whose values the op needs on the host (shapes, axes, lengths); the executor
    /// reads them back before calling [`Op::run`] if they are on the GPU.
    fn host_inputs(&self) -> &[usize] {
        &[]
    }
    /// Runs the op: records GPU work into `cx` or computes on the host.
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>>;
}

/// Attribute access for builders.
pub struct Attrs<'a> {
    /// The node.
    pub node: &'a Node,
    /// Opset version of the node's domain.
    pub opset: i64,
}

impl Attrs<'_> {
    fn get(&self, name: &str) -> Option<&proto::AttributeProto> {
        self.node.attributes.iter().find(|a| a.name() == name)
    }
    /// An error about this node.
    pub fn err(&self, reason: impl Into<String>) -> Error {
        Error::Op {
            node: self.node.name.clone(),
            op: self.node.op_type.clone(),
            reason: reason.into(),
        }
    }
    /// Integer attribute.
    pub fn i(&self, name: &str) -> Option<i64> {
        self.get(name).map(|a| a.i())
    }
    /// Integer attribute with default.
    pub fn i_or(&self, name: &str, d: i64) -> i64 {
        self.i(name).unwrap_or(d)
    }
    /// Float attribute with default.
    pub fn f_or(&self, name: &str, d: f32) -> f32 {
        self.get(name).map_or(d, |a| a.f())
    }
    /// Integer list attribute.
    pub fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.get(name).map(|a| a.ints.clone())
    }
    /// Float list attribute.
    pub fn floats(&self, name: &str) -> Option<Vec<f32>> {
        self.get(name).map(|a| a.floats.clone())
    }
    /// String attribute.
    pub fn s(&self, name: &str) -> Option<String> {
        self.get(name)
            .map(|a| String::from_utf8_lossy(a.s()).into_owned())
    }
    /// Tensor attribute.
    pub fn t(&self, name: &str) -> Result<Option<HostTensor>> {
        match self.get(name).and_then(|a| a.t.as_ref()) {
            Some(t) => crate::model::tensor_from_proto(t)
                .map(Some)
                .map_err(|e| self.err(e.to_string())),
            None => Ok(None),
        }
    }
    /// Whether the attribute is present.
    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
    /// Rejects attributes we do not implement when they are set to a non-default value.
    pub fn reject_nonzero(&self, names: &[&str]) -> Result<()> {
        for n in names {
            if self.i(n).is_some_and(|v| v != 0) {
                return Err(self.err(format!("attribute {n} is not supported")));
            }
        }
        Ok(())
    }
}

/// Builds an op from its attributes.
pub type Builder = fn(&Attrs<'_>) -> Result<Box<dyn Op>>;

/// All ops the runtime implements.
pub struct Registry {
    ops: HashMap<(String, String), Builder>,
}

impl Default for Registry {
    fn default() -> Self {
        let mut r = Self {
            ops: HashMap::new(),
        };
        elementwise::register(&mut r);
        shape::register(&mut r);
        movement::register(&mut r);
        reduce::register(&mut r);
        norm::register(&mut r);
        matmul::register(&mut r);
        quant::register(&mut r);
        attention::register(&mut r);
        sdpa::register(&mut r);
        r
    }
}

impl Registry {
    /// Registers an op (`domain` `""` = ai.onnx).
    pub fn register(&mut self, domain: &str, op: &str, b: Builder) {
        self.ops.insert((domain.to_string(), op.to_string()), b);
    }

    /// Whether `(domain, op)` is implemented.
    pub fn claims(&self, domain: &str, op: &str) -> bool {
        let d = crate::model::canonical_domain(domain);
        self.ops.contains_key(&(d.to_string(), op.to_string()))
    }

    /// Every claimed (domain, op), sorted.
    pub fn claimed(&self) -> Vec<(String, String)> {
        let mut v: Vec<_> = self.ops.keys().cloned().collect();
        v.sort();
        v
    }

    /// Builds the op of one node.
    pub fn build_node(
        &self,
        graph: &Graph,
        node: &Node,
    ) -> std::result::Result<Box<dyn Op>, Unsupported> {
        let unsupported = |reason: String| Unsupported {
            domain: node.domain.clone(),
            op: node.op_type.clone(),
            node: node.name.clone(),
            reason,
        };
        let b = self
            .ops
            .get(&(node.domain.clone(), node.op_type.clone()))
            .ok_or_else(|| unsupported("no such op in the registry".into()))?;
        b(&Attrs {
            node,
            opset: graph.opset(&node.domain),
        })
        .map_err(|e| unsupported(e.to_string()))
    }

    /// Every unsupported node of the graph (unknown op or unsupported attributes).
    pub fn check(&self, graph: &Graph) -> Vec<Unsupported> {
        graph
            .nodes
            .iter()
            .filter_map(|n| self.build_node(graph, n).err())
            .collect()
    }

    /// Builds every node, or fails listing all unsupported ones.
    pub fn build(&self, graph: &Graph) -> Result<Vec<Box<dyn Op>>> {
        let mut ops = Vec::new();
        let mut bad = Vec::new();
        for n in &graph.nodes {
            match self.build_node(graph, n) {
                Ok(op) => ops.push(op),
                Err(u) => bad.push(u),
            }
        }
        if bad.is_empty() {
            Ok(ops)
        } else {
            Err(Error::Unsupported(bad))
        }
    }
}

/// Input `i`, required.
pub fn req<'v>(inputs: &[Option<&'v Value>], i: usize) -> Result<&'v Value> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| crate::error::op_err(format!("required input {i} is missing")))
}

/// Input `i` as a host tensor (the executor guarantees this for [`Op::host_inputs`]).
pub fn host_in<'v>(inputs: &[Option<&'v Value>], i: usize) -> Result<&'v HostTensor> {
    req(inputs, i)?
        .host()
        .ok_or_else(|| crate::error::op_err(format!("input {i} must be on the host")))
}

/// Optional input `i` as host tensor.
pub fn opt_host<'v>(inputs: &[Option<&'v Value>], i: usize) -> Result<Option<&'v HostTensor>> {
    match inputs.get(i).copied().flatten() {
        None => Ok(None),
        Some(v) => v
            .host()
            .map(Some)
            .ok_or_else(|| crate::error::op_err(format!("input {i} must be on the host"))),
    }
}

/// Whether every present input is on the host.
pub fn all_host(inputs: &[Option<&Value>]) -> bool {
    inputs.iter().flatten().all(|v| matches!(v, Value::Host(_)))
}

/// Whether values of this dtype are computed on the host (int64 and f64 never go to the GPU).
pub fn host_dtype(d: DType) -> bool {
    matches!(d, DType::I64 | DType::F64)
}

/// Normalises a possibly negative axis.
pub fn axis(a: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let v = if a < 0 { a + r } else { a };
    if v < 0 || v >= r.max(1) {
        return Err(crate::error::op_err(format!(
            "axis {a} out of range for rank {rank}"
        )));
    }
    Ok(v as usize)
}

/// Indices into a dimension of `dim` entries, when the host holds them: each must lie in
/// [-dim, dim) (ONNX's range, negative counting from the end), else an error naming the first
/// outside. The GPU kernels read such an index as zeros, so a host value is checked before it
/// goes up (token ids beyond the embedding table, positions beyond a rotary table).
pub fn check_host_indices(v: &Value, dim: usize, what: &str) -> Result<()> {
    let Value::Host(h) = v else {
        return Ok(());
    };
    let n = dim as i64;
    if let Some(q) = h.to_i64().into_iter().find(|&q| q < -n || q >= n) {
        return Err(crate::error::op_err(format!(
            "{what} {q} out of range for a dimension of {dim}"
        )));
    }
    Ok(())
}

/// A GPU tensor from an input (uploading host values).
pub fn gpu_in(cx: &mut Ctx<'_>, inputs: &[Option<&Value>], i: usize) -> Result<GpuTensor> {
    let v = req(inputs, i)?;
    cx.to_gpu(v)
}
