//! Only the last row of a prompt's logits.
//!
//! A decoder without `num_logits_to_keep` (mobius's ONNX Runtime GenAI packages) writes a row of
//! logits per fed token, and generation reads only the last: for a prompt of n tokens the lm_head
//! computes n × vocab logits (at Gemma 4's 262144 ids, 1 GiB of float32 at 1024 tokens, more than
//! many adapters can allocate or bind) to keep one row. [`keep_last_logits_row`] rewrites such a
//! graph so that the tail after the last layer (the final norm, the lm_head product and the
//! elementwise logit soft-cap) runs on the last position only: a `Slice` of the last row along the
//! sequence axis before that tail. The logits become `[batch, 1, vocab]`, the same values as the
//! last row of the graph as written (every op of the tail works row by row), and a decode step
//! (one row) is unchanged: slicing its one row is no copy.

use gg_runtime::DType;
use gg_runtime::model::{Dim, Graph, InitData, Initializer, Node};
use std::collections::{HashMap, HashSet};

/// The logits output the rewrite looks for.
const LOGITS: &str = "logits";

/// Elementwise ops the tail may hold between the lm_head and `logits` (each with one operand
/// from the tail and the others single-element constants).
const ELEMENTWISE: [&str; 7] = ["Mul", "Div", "Add", "Sub", "Tanh", "Cast", "Identity"];

/// Norms over the last axis the tail may start with (the final norm before the lm_head).
const NORMS: [&str; 3] = [
    "RMSNormalization",
    "SimplifiedLayerNormalization",
    "LayerNormalization",
];

/// Rewrites `graph` to compute the logits of the last position only (module doc). Returns whether
/// it did: `false` leaves the graph untouched (it has `num_logits_to_keep`, or its tail is not
/// one this rewrite can prove row-wise: then every row is computed, as written).
pub fn keep_last_logits_row(graph: &mut Graph) -> bool {
    if graph.inputs.iter().any(|i| i.name == "num_logits_to_keep") || graph.opset("") < 10 {
        return false;
    }
    let Some(out) = graph.outputs.iter().position(|o| o.name == LOGITS) else {
        return false;
    };
    // [batch, sequence, vocab]: the sequence axis is 1.
    if graph.outputs[out].dims.as_ref().map(Vec::len) != Some(3) {
        return false;
    }
    let Some(points) = tail_inputs(graph) else {
        return false;
    };
    let names = ["starts", "ends", "axes"].map(|k| format!("gg.last_row.{k}"));
    let taken: HashSet<&str> = graph
        .initializers
        .iter()
        .map(|i| i.name.as_str())
        .chain(
            graph
                .nodes
                .iter()
                .flat_map(|n| n.outputs.iter().map(String::as_str)),
        )
        .collect();
    let sliced = |k: usize| format!("gg.last_row.{k}");
    if names.iter().any(|n| taken.contains(n.as_str()))
        || (0..points.len()).any(|k| taken.contains(sliced(k).as_str()))
    {
        return false;
    }
    for (name, v) in names.iter().zip([-1i64, i64::MAX, 1]) {
        graph.initializers.push(Initializer {
            name: name.clone(),
            dtype: DType::I64,
            shape: vec![1],
            data: InitData::Inline(v.to_le_bytes().to_vec()),
        });
    }
    // Each Slice right before its consumer, the later consumers first (indices stay valid).
    let mut points: Vec<(usize, (usize, usize))> = points.into_iter().enumerate().collect();
    points.sort_by_key(|&(_, (node, _))| std::cmp::Reverse(node));
    for (k, (node, input)) in points {
        let hidden = std::mem::replace(&mut graph.nodes[node].inputs[input], sliced(k));
        graph.nodes.insert(
            node,
            Node {
                name: format!("gg.last_row.slice.{k}"),
                op_type: "Slice".into(),
                domain: String::new(),
                inputs: vec![hidden, names[0].clone(), names[1].clone(), names[2].clone()],
                outputs: vec![sliced(k)],
                attributes: Vec::new(),
            },
        );
    }
    if let Some(dims) = graph.outputs[out].dims.as_mut() {
        dims[1] = Dim::Fixed(1);
    }
    true
}

/// Where the row-wise tail reads the hidden states, as (node, input slot): the lm_head's input;
/// or the final norm's, when a norm over the last axis feeds only the lm_head; or, when that
/// norm's input is a residual sum `(Norm(o) + res) [* scalar]` read by it alone, `o` and `res`
/// (so that the fused kernel of that residual, the norm and the lm_head stays one group: on a
/// decode step the slices are no copies). `None` unless every node from there to `logits` is
/// proven row-wise and used by the tail alone.
fn tail_inputs(graph: &Graph) -> Option<Vec<(usize, usize)>> {
    let producer: HashMap<&str, usize> = graph
        .nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.outputs.iter().map(move |o| (o.as_str(), i)))
        .collect();
    let mut uses: HashMap<&str, usize> = HashMap::new();
    for n in &graph.nodes {
        for i in n.inputs.iter().filter(|i| !i.is_empty()) {
            *uses.entry(i.as_str()).or_default() += 1;
        }
    }
    let outputs: HashSet<&str> = graph.outputs.iter().map(|o| o.name.as_str()).collect();
    let init: HashMap<&str, &Initializer> = graph
        .initializers
        .iter()
        .map(|i| (i.name.as_str(), i))
        .collect();
    // Elements of a constant operand (an initializer, a Constant node's value, or a Cast /
    // CastLike of one: CastLike's second input gives only the type).
    let const_numel = |name: &str| -> Option<usize> {
        let mut name = name;
        for _ in 0..4 {
            if let Some(i) = init.get(name) {
                return Some(i.shape.iter().product());
            }
            let n = &graph.nodes[*producer.get(name)?];
            match (n.domain.as_str(), n.op_type.as_str()) {
                ("", "Constant") => {
                    let t = n
                        .attributes
                        .iter()
                        .find(|a| a.name() == "value")?
                        .t
                        .as_ref()?;
                    return t.dims.iter().product::<i64>().try_into().ok();
                }
                ("", "Cast" | "CastLike") => name = n.inputs.first()?,
                _ => return None,
            }
        }
        None
    };
    // Only the tail reads `name` (and it is no graph output).
    let private = |name: &str| uses.get(name) == Some(&1) && !outputs.contains(name);
    // The norm producing `v` over the last axis with constant parameters, read by the tail alone.
    let norm_of = |v: &str| -> Option<usize> {
        let j = *producer.get(v)?;
        let norm = &graph.nodes[j];
        let last_axis = norm
            .attributes
            .iter()
            .find(|a| a.name() == "axis")
            .is_none_or(|a| a.i() == -1 || a.i() == 2);
        let params = norm.inputs.get(1..)?.iter().filter(|p| !p.is_empty());
        let params_const = params
            .clone()
            .all(|p| init.get(p.as_str()).is_some_and(|w| w.shape.len() == 1));
        let one_output = norm.outputs.iter().skip(1).all(String::is_empty);
        (norm.domain.is_empty()
            && NORMS.contains(&norm.op_type.as_str())
            && last_axis
            && params_const
            && params.count() >= 1
            && one_output
            && private(v))
        .then_some(j)
    };
    // `(Norm(o) + res) [* scalar]` producing `v`: the slots of `o` and `res`.
    let residual = |v: &str| -> Option<Vec<(usize, usize)>> {
        let mut sum = v;
        let m = *producer.get(v)?;
        let mul = &graph.nodes[m];
        if mul.domain.is_empty() && mul.op_type == "Mul" && mul.inputs.len() == 2 {
            let [a, b] = [mul.inputs[0].as_str(), mul.inputs[1].as_str()];
            sum = match (const_numel(a) == Some(1), const_numel(b) == Some(1)) {
                (false, true) => a,
                (true, false) => b,
                _ => return None,
            };
            if !private(v) {
                return None;
            }
        }
        let a = *producer.get(sum)?;
        let add = &graph.nodes[a];
        if !(add.domain.is_empty()
            && add.op_type == "Add"
            && add.inputs.len() == 2
            && add.inputs[0] != add.inputs[1]
            && private(sum))
        {
            return None;
        }
        for (ni, ri) in [(0, 1), (1, 0)] {
            if const_numel(&add.inputs[ri]).is_some() {
                return None;
            }
            if let Some(n) = norm_of(&add.inputs[ni]) {
                return Some(vec![(n, 0), (a, ri)]);
            }
        }
        None
    };
    let mut t = LOGITS;
    for _ in 0..16 {
        let i = *producer.get(t)?;
        let n = &graph.nodes[i];
        match (n.domain.as_str(), n.op_type.as_str()) {
            ("", op) if ELEMENTWISE.contains(&op) => {
                let mut dynamic = None;
                for x in n.inputs.iter().filter(|x| !x.is_empty()) {
                    if const_numel(x) == Some(1) {
                        continue;
                    }
                    if dynamic.replace(x.as_str()).is_some() {
                        return None;
                    }
                }
                t = dynamic?;
                if !private(t) {
                    return None;
                }
            }
            ("", "MatMul") | ("com.microsoft", "MatMulNBits") => {
                let weight = init.get(n.inputs.get(1)?.as_str())?;
                if n.op_type == "MatMul" && weight.shape.len() != 2 {
                    return None;
                }
                let x = n.inputs.first()?.as_str();
                let Some(j) = norm_of(x) else {
                    return Some(vec![(i, 0)]);
                };
                return Some(residual(&graph.nodes[j].inputs[0]).unwrap_or(vec![(j, 0)]));
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use gg_runtime::model::ValueInfo;

    fn graph(path: &str) -> Graph {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/models")
            .join(path);
        Graph::decode(&std::fs::read(&p).expect("fixture"), path).expect("graph")
    }

    fn slices(g: &Graph) -> Vec<&Node> {
        g.nodes
            .iter()
            .filter(|n| n.op_type == "Slice" && n.name.starts_with("gg.last_row"))
            .collect()
    }

    /// The consumer of a slice's output and the op there.
    fn consumer<'g>(g: &'g Graph, s: &Node) -> &'g Node {
        let users: Vec<&Node> = g
            .nodes
            .iter()
            .filter(|n| n.inputs.contains(&s.outputs[0]))
            .collect();
        assert_eq!(users.len(), 1);
        users[0]
    }

    #[test]
    fn mobius_decoders_keep_the_last_row_before_their_residual_tail() {
        for (path, lm_head) in [
            (
                "mobius-tiny-gqa-int4-split/decoder/model.onnx",
                "MatMulNBits",
            ),
            ("mobius-tiny-attn-fp32-split/decoder/model.onnx", "MatMul"),
            (
                "mobius-tiny-webgpu-int4f16-split/decoder/model.onnx",
                "MatMulNBits",
            ),
        ] {
            let mut g = graph(path);
            let before = g.nodes.len();
            assert!(keep_last_logits_row(&mut g), "{path}");
            assert_eq!(g.nodes.len(), before + 2, "{path}");
            let s = slices(&g);
            // o of the last layer's post-per-layer-input norm, and the residual of its Add.
            let ops: Vec<&str> = s.iter().map(|s| consumer(&g, s).op_type.as_str()).collect();
            assert!(
                ops.contains(&"Add") && ops.iter().any(|o| NORMS.contains(o)),
                "{path}: {ops:?}"
            );
            // Each slice precedes its consumer; its axis 1 from -1 on.
            for sl in &s {
                let at = |n: &Node| g.nodes.iter().position(|m| std::ptr::eq(m, n)).unwrap();
                assert!(at(sl) < at(consumer(&g, sl)));
            }
            let logits = g.outputs.iter().find(|o| o.name == LOGITS).unwrap();
            assert_eq!(logits.dims.as_ref().unwrap()[1], Dim::Fixed(1));
            assert!(g.nodes.iter().any(|n| n.op_type == lm_head));
            // A second pass finds its names taken: nothing changes.
            let n = g.nodes.len();
            assert!(!keep_last_logits_row(&mut g));
            assert_eq!(g.nodes.len(), n);
        }
    }

    #[test]
    fn graphs_it_cannot_prove_row_wise_stay_as_written() {
        // onnx-community's decoder takes num_logits_to_keep.
        let mut g = graph("gemma4-tiny/onnx/decoder_model_merged_q4.onnx");
        let n = g.nodes.len();
        assert!(!keep_last_logits_row(&mut g));
        assert_eq!(g.nodes.len(), n);
        let path = "mobius-tiny-gqa-int4-split/decoder/model.onnx";
        let producer = |g: &Graph, op: &str| {
            let mut t = LOGITS.to_string();
            loop {
                let n = g.nodes.iter().find(|n| n.outputs.contains(&t)).unwrap();
                if n.op_type == op {
                    return n.clone();
                }
                t = n.inputs[0].clone();
            }
        };
        // The soft-cap's divisor with a row per position: not a single-element constant.
        let mut g = graph(path);
        let div = producer(&g, "Div");
        let c = g
            .initializers
            .iter_mut()
            .find(|i| i.name == div.inputs[1])
            .unwrap();
        c.shape = vec![4, 1];
        assert!(!keep_last_logits_row(&mut g));
        // The lm_head's output read elsewhere too (a graph output).
        let mut g = graph(path);
        let mm = producer(&g, "MatMulNBits");
        g.outputs.push(ValueInfo {
            name: mm.outputs[0].clone(),
            elem_type: 1,
            dims: None,
        });
        assert!(!keep_last_logits_row(&mut g));
        // An op the rewrite does not know in the tail (Softmax over the rows).
        let mut g = graph(path);
        let tanh = g.nodes.iter_mut().find(|n| n.op_type == "Tanh").unwrap();
        tanh.op_type = "Softmax".into();
        assert!(!keep_last_logits_row(&mut g));
        // Logits of another rank: no sequence axis to cut.
        let mut g = graph(path);
        let o = g.outputs.iter_mut().find(|o| o.name == LOGITS).unwrap();
        o.dims = Some(vec![Dim::Param("n".into()), Dim::Fixed(1024)]);
        assert!(!keep_last_logits_row(&mut g));
        // The residual sum read elsewhere too (a graph output): one slice, before the final norm.
        let mut g = graph(path);
        let mm = producer(&g, "MatMulNBits");
        let norm = g
            .nodes
            .iter()
            .find(|n| n.outputs[0] == mm.inputs[0])
            .unwrap()
            .clone();
        g.outputs.push(ValueInfo {
            name: norm.inputs[0].clone(),
            elem_type: 1,
            dims: None,
        });
        assert!(keep_last_logits_row(&mut g));
        let s = slices(&g);
        assert_eq!(s.len(), 1);
        assert_eq!(consumer(&g, s[0]).name, norm.name);
    }
}
