//! Model-local functions (`ModelProto.functions`): a node whose op the registry does not
//! implement but which the model defines as a `FunctionProto` (same domain, name and overload)
//! is replaced at load by the function's body, so that exporters' fallback bodies run (the mobius
//! exporter ships some). Natively registered ops keep their kernels even when the model also
//! defines them as functions.
//!
//! Inlining follows the ONNX function semantics: the call's inputs and outputs bind the
//! function's formal ones by position (missing or empty ones are absent), every other value of
//! the body gets a fresh name unique in the graph (`<call node>/<name>`), attributes that refer
//! to the caller's (`ref_attr_name`) take the caller's value, else the function's default
//! (`attribute_proto`), else are left out, and calls inside a body are inlined in turn (nesting
//! is bounded, recursion refused). A function's opset imports must agree with the model's.

use crate::error::{Error, Result};
use crate::model::canonical_domain;
use crate::proto;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Deepest nesting of function calls inlined.
const MAX_DEPTH: usize = 32;
/// Most nodes a graph may have after inlining (a guard against exponential bodies).
const MAX_NODES: usize = 1 << 20;

/// A call of a model-local function that was inlined at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inlined {
    /// The calling node's name (`<outer call>/<name>` for calls inside a body).
    pub node: String,
    /// The function's domain (`""` = ai.onnx).
    pub domain: String,
    /// The function's name (the node's op type).
    pub op: String,
    /// Nodes of the body that replaced it (nested calls counted as their own bodies' nodes).
    pub nodes: usize,
}

type Key = (String, String, String);

struct Inliner<'a> {
    funcs: HashMap<Key, &'a proto::FunctionProto>,
    claims: &'a dyn Fn(&str, &str) -> bool,
    taken: HashSet<String>,
    out: Vec<proto::NodeProto>,
    inlined: Vec<Inlined>,
    stack: Vec<Key>,
}

impl Inliner<'_> {
    fn fresh(&mut self, base: String) -> String {
        let mut name = base.clone();
        let mut k = 1;
        while self.taken.contains(&name) {
            name = format!("{base}#{k}");
            k += 1;
        }
        self.taken.insert(name.clone());
        name
    }

    /// Appends `node`, or the body of the function it calls.
    fn expand(&mut self, node: proto::NodeProto, name: String) -> Result<()> {
        let domain = canonical_domain(node.domain()).to_string();
        let key = (
            domain.clone(),
            node.op_type().to_string(),
            node.overload().to_string(),
        );
        let func = match self.funcs.get(&key) {
            Some(f) if !(self.claims)(&domain, node.op_type()) => *f,
            _ => {
                if self.out.len() >= MAX_NODES {
                    return Err(Error::Invalid(format!(
                        "more than {MAX_NODES} nodes after inlining model-local functions"
                    )));
                }
                let mut node = node;
                node.name = Some(name);
                self.out.push(node);
                return Ok(());
            }
        };
        let what = || format!("function {}:{} called by node {name}", key.0, key.1);
        if self.stack.contains(&key) {
            return Err(Error::Invalid(format!("{} calls itself", what())));
        }
        if self.stack.len() >= MAX_DEPTH {
            return Err(Error::Invalid(format!(
                "{}: function calls nested deeper than {MAX_DEPTH}",
                what()
            )));
        }
        if node.input.len() > func.input.len() || node.output.len() > func.output.len() {
            return Err(Error::Invalid(format!(
                "{}: {} inputs and {} outputs given, the function has {} and {}",
                what(),
                node.input.len(),
                node.output.len(),
                func.input.len(),
                func.output.len()
            )));
        }
        // Formal name -> actual name ("" = absent).
        let mut names: HashMap<String, String> = HashMap::new();
        for (i, formal) in func.input.iter().enumerate() {
            let actual = node.input.get(i).cloned().unwrap_or_default();
            names.insert(formal.clone(), actual);
        }
        for (j, formal) in func.output.iter().enumerate() {
            let actual = match node.output.get(j) {
                Some(a) if !a.is_empty() => a.clone(),
                _ => self.fresh(format!("{name}/{formal}")),
            };
            names.insert(formal.clone(), actual);
        }
        let defaults: HashMap<&str, &proto::AttributeProto> =
            func.attribute_proto.iter().map(|a| (a.name(), a)).collect();
        let given: HashMap<&str, &proto::AttributeProto> =
            node.attribute.iter().map(|a| (a.name(), a)).collect();
        for a in &node.attribute {
            let known =
                func.attribute.iter().any(|n| n == a.name()) || defaults.contains_key(a.name());
            if !known {
                return Err(Error::Invalid(format!(
                    "{}: attribute {} is not one of the function's",
                    what(),
                    a.name()
                )));
            }
        }
        let first = self.out.len();
        self.stack.push(key.clone());
        for (i, body) in func.node.iter().enumerate() {
            let mut n = body.clone();
            let mut rename = |v: &String, this: &mut Self| -> String {
                if v.is_empty() {
                    return String::new();
                }
                if let Some(a) = names.get(v) {
                    return a.clone();
                }
                let f = this.fresh(format!("{name}/{v}"));
                names.insert(v.clone(), f.clone());
                f
            };
            n.input = body.input.iter().map(|v| rename(v, self)).collect();
            n.output = body.output.iter().map(|v| rename(v, self)).collect();
            let mut attrs = Vec::new();
            for a in &body.attribute {
                let r = a.ref_attr_name();
                if r.is_empty() {
                    if a.g.is_some() || !a.graphs.is_empty() {
                        return Err(Error::Invalid(format!(
                            "{}: bodies with subgraph attributes are not supported",
                            what()
                        )));
                    }
                    attrs.push(a.clone());
                    continue;
                }
                if let Some(v) = given.get(r).or_else(|| defaults.get(r)) {
                    let mut v = (*v).clone();
                    v.name = a.name.clone();
                    v.ref_attr_name = None;
                    attrs.push(v);
                }
            }
            n.attribute = attrs;
            let inner = if body.name().is_empty() {
                format!("{name}/{}_{i}", body.op_type())
            } else {
                format!("{name}/{}", body.name())
            };
            self.expand(n, inner)?;
        }
        self.stack.pop();
        self.inlined.push(Inlined {
            node: name,
            domain: key.0,
            op: key.1,
            nodes: self.out.len() - first,
        });
        Ok(())
    }
}

/// The graph's nodes with every call of a model-local function whose op `claims` does not
/// implement replaced by the function's body (see the module docs), and the calls inlined in
/// the order they were. `opsets` (the model's imports, domain `""` = ai.onnx) gains the
/// domains only the functions import. Unnamed nodes are named `#index` as the loader names them.
pub fn inline(
    graph: &proto::GraphProto,
    functions: &[proto::FunctionProto],
    opsets: &mut BTreeMap<String, i64>,
    claims: &dyn Fn(&str, &str) -> bool,
) -> Result<(Vec<proto::NodeProto>, Vec<Inlined>)> {
    let name_of = |i: usize, n: &proto::NodeProto| {
        if n.name().is_empty() {
            format!("#{i}")
        } else {
            n.name().to_string()
        }
    };
    if functions.is_empty() {
        let nodes = graph
            .node
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut n = n.clone();
                n.name = Some(name_of(i, &n));
                n
            })
            .collect();
        return Ok((nodes, Vec::new()));
    }
    let mut funcs: HashMap<Key, &proto::FunctionProto> = HashMap::new();
    for f in functions {
        let key = (
            canonical_domain(f.domain()).to_string(),
            f.name().to_string(),
            f.overload().to_string(),
        );
        if funcs.insert(key.clone(), f).is_some() {
            return Err(Error::Invalid(format!(
                "model-local function {}:{} is defined twice",
                key.0, key.1
            )));
        }
    }
    let mut taken: HashSet<String> = HashSet::new();
    for v in graph.input.iter().chain(&graph.output) {
        taken.insert(v.name().to_string());
    }
    for t in &graph.initializer {
        taken.insert(t.name().to_string());
    }
    for n in &graph.node {
        taken.extend(n.input.iter().chain(&n.output).cloned());
    }
    let mut inl = Inliner {
        funcs,
        claims,
        taken,
        out: Vec::with_capacity(graph.node.len()),
        inlined: Vec::new(),
        stack: Vec::new(),
    };
    for (i, n) in graph.node.iter().enumerate() {
        inl.expand(n.clone(), name_of(i, n))?;
    }
    // The opsets of the functions whose bodies were inlined.
    let used: HashSet<(String, String)> = inl
        .inlined
        .iter()
        .map(|c| (c.domain.clone(), c.op.clone()))
        .collect();
    for f in functions {
        if !used.contains(&(
            canonical_domain(f.domain()).to_string(),
            f.name().to_string(),
        )) {
            continue;
        }
        for o in &f.opset_import {
            let d = canonical_domain(o.domain()).to_string();
            match opsets.get(&d) {
                Some(&v) if v != o.version() => {
                    return Err(Error::Invalid(format!(
                        "model-local function {}:{} imports opset {} of domain {:?}, the model {v}",
                        canonical_domain(f.domain()),
                        f.name(),
                        o.version(),
                        d
                    )));
                }
                Some(_) => {}
                None => {
                    opsets.insert(d, o.version());
                }
            }
        }
    }
    Ok((inl.out, inl.inlined))
}
