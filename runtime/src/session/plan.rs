//! Planning at load: the execution order, buffer lifetimes (which values to drop after each
//! step) and the layout of weight packs.

use super::{Session, Step};
use crate::error::{Error, Result};
use crate::gpu::Storage;
use crate::model::{Graph, Initializer, Node};
use crate::ops::Op;
use std::collections::HashMap;

impl Session {
    /// Buffers for the weight packs the fusion pass asked for: per pack one buffer, each member
    /// at a multiple of the storage offset alignment.
    pub(super) fn plan_packs(&mut self, packs: &[Vec<String>]) {
        let align = u64::from(self.gpu.limits.min_storage_buffer_offset_alignment).max(4);
        let by_name: HashMap<&str, &Initializer> = self
            .graph
            .initializers
            .iter()
            .map(|i| (i.name.as_str(), i))
            .collect();
        for pack in packs {
            let mut layout = Vec::new();
            let mut end = 0u64;
            for name in pack {
                let Some(storage) = by_name
                    .get(name.as_str())
                    .and_then(|i| Storage::of(i.dtype).map(|s| s.bytes(i.shape.iter().product())))
                else {
                    continue;
                };
                let slot = storage.max(4).next_multiple_of(align);
                layout.push((name.clone(), end, slot));
                end += slot;
            }
            if layout.len() < 2 || end > self.gpu.max_weight_part {
                continue;
            }
            let buf = crate::exec::PooledBuffer::unpooled(
                self.gpu
                    .create_buffer(end, &format!("{} (packed)", pack[0])),
            );
            for (name, at, slot) in layout {
                self.packed.insert(name, (buf.clone(), at, slot));
            }
        }
    }
}

/// Buffer lifetimes: the value ids to drop after each step of `order`: each value after its last
/// consumer (graph outputs and initializers never).
pub(super) fn frees(
    graph: &Graph,
    ids: &HashMap<String, usize>,
    order: &[usize],
    node_in: &[Vec<Option<usize>>],
    node_out: &[Vec<usize>],
) -> Vec<Vec<usize>> {
    let mut last: HashMap<usize, usize> = HashMap::new();
    for (step, &n) in order.iter().enumerate() {
        for v in node_in[n].iter().flatten() {
            last.insert(*v, step);
        }
        for v in &node_out[n] {
            last.entry(*v).or_insert(step);
        }
    }
    let keep: std::collections::HashSet<usize> = graph
        .outputs
        .iter()
        .filter_map(|o| ids.get(&o.name).copied())
        .chain(
            graph
                .initializers
                .iter()
                .filter_map(|i| ids.get(&i.name).copied()),
        )
        .collect();
    let mut frees = vec![Vec::new(); order.len()];
    for (v, step) in last {
        if !keep.contains(&v) {
            frees[step].push(v);
        }
    }
    frees
}

/// The plan: each node with its op, value ids and frees, in `order` (a permutation of the
/// nodes, from [`topo_order`]; `frees[k]` belongs to the `k`-th step).
pub(super) fn steps(
    nodes: Vec<Node>,
    ops: Vec<Box<dyn Op>>,
    node_in: Vec<Vec<Option<usize>>>,
    node_out: Vec<Vec<usize>>,
    order: &[usize],
    frees: Vec<Vec<usize>>,
) -> Vec<Step> {
    let mut parts: Vec<Option<_>> = nodes
        .into_iter()
        .zip(ops)
        .zip(node_in)
        .zip(node_out)
        .map(Some)
        .collect();
    order
        .iter()
        .zip(frees)
        .filter_map(|(&n, frees)| {
            let (((node, op), inputs), outputs) = parts[n].take()?;
            Some(Step {
                node,
                op,
                inputs,
                outputs,
                frees,
            })
        })
        .collect()
}

pub(super) fn topo_order(
    n: usize,
    node_in: &[Vec<Option<usize>>],
    node_out: &[Vec<usize>],
) -> Result<Vec<usize>> {
    let mut producer: HashMap<usize, usize> = HashMap::new();
    for (n, outs) in node_out.iter().enumerate() {
        for &v in outs {
            producer.insert(v, n);
        }
    }
    let mut indeg = vec![0usize; n];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, ins) in node_in.iter().enumerate() {
        for v in ins.iter().flatten() {
            if let Some(&p) = producer.get(v)
                && p != i
            {
                indeg[i] += 1;
                users[p].push(i);
            }
        }
    }
    let mut ready: std::collections::BTreeSet<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &u in &users[i] {
            indeg[u] -= 1;
            if indeg[u] == 0 {
                ready.insert(u);
            }
        }
    }
    if order.len() != n {
        return Err(Error::Invalid("the graph has a cycle".into()));
    }
    Ok(order)
}
