//! Running: inputs checked against the graph's declarations, the planned order executed into a
//! recording context, outputs returned where they were produced.

use super::profile::{profile_clock, profile_micros};
use super::{Session, Step};
use crate::error::{Error, Result};
use crate::exec::{Ctx, GpuTensor, Value};
use crate::model::Dim;
use crate::tensor::{DType, HostTensor};
use std::collections::HashMap;

impl Session {
    /// Runs the graph. Inputs may be host tensors or GPU tensors (e.g. a KV cache kept on the GPU);
    /// returns every graph output, left where it was produced (use [`Session::read`]).
    pub async fn run(&self, inputs: Vec<(String, Value)>) -> Result<Vec<(String, Value)>> {
        let mut cx = self.context();
        let out = self.run_in(&mut cx, inputs).await?;
        cx.flush();
        self.gpu.take_error()?;
        Ok(out)
    }

    /// [`Session::run`] recorded into `cx` (a context of any session on the same GPU: see
    /// [`Session::context`]) and not submitted, so that several graphs and the caller's own
    /// kernels go to the GPU in one submit, at the context's next [`Ctx::flush`] or
    /// [`Ctx::download`]. Intermediate buffers come from, and return to, `cx`'s pool. A graph
    /// whose ops must read a GPU value on the host still submits at that point.
    pub async fn run_in(
        &self,
        cx: &mut Ctx<'_>,
        inputs: Vec<(String, Value)>,
    ) -> Result<Vec<(String, Value)>> {
        if !std::ptr::eq(cx.gpu, &*self.gpu) {
            return Err(Error::Invalid(
                "the recording context belongs to another GPU device than this session".into(),
            ));
        }
        let mut env = self.bind_inputs(cx, inputs)?;
        // GPU copies of this run's host values, made by the first op that uploads one.
        let mut run_copies: HashMap<usize, GpuTensor> = HashMap::new();
        for step in &self.steps {
            self.run_step(cx, step, &mut env, &mut run_copies).await?;
        }
        self.gpu.take_error()?;
        let mut out = Vec::new();
        for o in &self.graph.outputs {
            let id = self.ids[&o.name];
            let v = env[id]
                .take()
                .or_else(|| self.consts[id].clone())
                .ok_or_else(|| Error::Invalid(format!("output {} was not produced", o.name)))?;
            out.push((o.name.clone(), v));
        }
        Ok(out)
    }

    /// This run's values (indexed by value id) with the given inputs in place, each checked
    /// against the graph's declaration (name, dtype, rank, fixed and named dimensions agreeing
    /// across inputs) and float host tensors uploaded. The constants are read from
    /// `self.consts`, not copied per run.
    fn bind_inputs(
        &self,
        cx: &mut Ctx<'_>,
        inputs: Vec<(String, Value)>,
    ) -> Result<Vec<Option<Value>>> {
        let mut env: Vec<Option<Value>> = vec![None; self.consts.len()];
        let mut dims: HashMap<String, usize> = HashMap::new();
        let mut given = std::collections::HashSet::new();
        for (name, v) in inputs {
            let decl = self
                .graph
                .inputs
                .iter()
                .find(|i| i.name == name)
                .ok_or_else(|| Error::Input {
                    name: name.clone(),
                    reason: format!(
                        "not an input of the model (inputs: {})",
                        self.graph
                            .inputs
                            .iter()
                            .map(|i| i.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                })?;
            let want = decl.dtype().map_err(|e| Error::Input {
                name: name.clone(),
                reason: e.to_string(),
            })?;
            if v.dtype() != want {
                return Err(Error::Input {
                    name,
                    reason: format!(
                        "dtype {} but the model expects {}",
                        v.dtype().name(),
                        want.name()
                    ),
                });
            }
            if let Some(decl_dims) = &decl.dims {
                if decl_dims.len() != v.shape().len() {
                    return Err(Error::Input {
                        name,
                        reason: format!(
                            "shape {:?} but the model expects rank {} ({})",
                            v.shape(),
                            decl_dims.len(),
                            fmt_dims(decl_dims)
                        ),
                    });
                }
                for (d, &got) in decl_dims.iter().zip(v.shape()) {
                    match d {
                        Dim::Fixed(f) if *f as usize != got => {
                            return Err(Error::Input {
                                name,
                                reason: format!(
                                    "shape {:?} does not match [{}]",
                                    v.shape(),
                                    fmt_dims(decl_dims)
                                ),
                            });
                        }
                        Dim::Param(p) => {
                            if let Some(&prev) = dims.get(p)
                                && prev != got
                            {
                                return Err(Error::Input {
                                    name,
                                    reason: format!(
                                        "dimension {p} is {got} here but {prev} in another input"
                                    ),
                                });
                            }
                            dims.insert(p.clone(), got);
                        }
                        _ => {}
                    }
                }
            }
            let v = match v {
                Value::Host(h) if matches!(h.dtype, DType::F32 | DType::F16) => {
                    Value::Gpu(cx.upload(&h)?)
                }
                other => other,
            };
            given.insert(name.clone());
            env[self.ids[&name]] = Some(v);
        }
        if let Some(missing) = self.graph.inputs.iter().find(|i| !given.contains(&i.name)) {
            return Err(Error::Input {
                name: missing.name.clone(),
                reason: "required input not given".into(),
            });
        }
        Ok(env)
    }

    /// Runs one step of the plan: its inputs from `env` (a value it reads last is moved, not
    /// cloned), GPU values its op reads on the host downloaded, host values offered with the GPU
    /// copies kept of them, the op recorded into `cx`, its outputs into `env` and the values
    /// whose last reader it is dropped.
    async fn run_step(
        &self,
        cx: &mut Ctx<'_>,
        step: &Step,
        env: &mut [Option<Value>],
        run_copies: &mut HashMap<usize, GpuTensor>,
    ) -> Result<()> {
        let node = &step.node;
        let before = self.gpu.counters.dispatches.get();
        let wrap = |e: Error| match e {
            Error::Op {
                node: nn, reason, ..
            } if nn.is_empty() => Error::Op {
                node: node.name.clone(),
                op: node.op_type.clone(),
                reason,
            },
            Error::Gpu(reason) => Error::Op {
                node: node.name.clone(),
                op: node.op_type.clone(),
                reason,
            },
            other => other,
        };
        let mut ins = self.step_inputs(step, env)?;
        for &k in step.op.host_inputs() {
            if let Some(Some(Value::Gpu(t))) = ins.get(k) {
                let t = t.clone();
                ins[k] = Some(Value::Host(cx.download(&t).await.map_err(wrap)?));
            }
        }
        self.offer_host_copies(cx, step, &ins, run_copies);
        let refs: Vec<Option<&Value>> = ins.iter().map(Option::as_ref).collect();
        let profiling = self.profile.borrow().is_some();
        let clock = if profiling {
            profile_clock(cx, &self.gpu)
        } else {
            None
        };
        let outs = step.op.run(cx, &refs).map_err(wrap)?;
        self.keep_host_copies(cx, run_copies);
        self.gpu.take_error().map_err(wrap)?;
        if profiling {
            let micros = profile_micros(cx, &self.gpu, clock);
            if let Some(p) = self.profile.borrow_mut().as_mut() {
                let e = p.entry(node.op_type.clone()).or_default();
                e.runs += 1;
                e.dispatches += self.gpu.counters.dispatches.get() - before;
                e.micros += micros;
            }
        }
        drop(ins);
        for (vid, v) in step.outputs.iter().zip(outs) {
            env[*vid] = Some(v);
        }
        for v in &step.frees {
            env[*v] = None;
            run_copies.remove(v);
        }
        Ok(())
    }

    /// A step's inputs from `env` (or the constants). A value this step reads last (and in no
    /// later slot) is moved into its inputs, not cloned: an op may then find a buffer nobody
    /// else holds and reuse it (GroupQueryAttention grows the KV cache in place).
    fn step_inputs(&self, step: &Step, env: &mut [Option<Value>]) -> Result<Vec<Option<Value>>> {
        let node = &step.node;
        let node_in = &step.inputs;
        let mut ins: Vec<Option<Value>> = Vec::with_capacity(node_in.len());
        for (k, vid) in node_in.iter().enumerate() {
            let v = match vid {
                None => None,
                Some(vid) => {
                    let last = step.frees.contains(vid) && !node_in[k + 1..].contains(&Some(*vid));
                    let v = if last {
                        env[*vid].take()
                    } else {
                        env[*vid].clone()
                    };
                    let v = v.or_else(|| self.consts[*vid].clone());
                    Some(v.ok_or_else(|| Error::Op {
                        node: node.name.clone(),
                        op: node.op_type.clone(),
                        reason: format!("input {} was never produced", node.inputs[k]),
                    })?)
                }
            };
            ins.push(v);
        }
        Ok(ins)
    }

    /// The host values among a step's inputs: an op uploading one gets the GPU copy the session
    /// keeps of it (constants: for the session; others: for this run).
    fn offer_host_copies(
        &self,
        cx: &mut Ctx<'_>,
        step: &Step,
        ins: &[Option<Value>],
        run_copies: &HashMap<usize, GpuTensor>,
    ) {
        cx.host_copies.clear();
        for (vid, v) in step.inputs.iter().zip(ins) {
            if let (Some(vid), Some(Value::Host(h))) = (vid, v) {
                let lasting = matches!(self.consts[*vid], Some(Value::Host(_)));
                let gpu = if lasting {
                    self.const_copies.borrow()[*vid].clone()
                } else {
                    run_copies.get(vid).cloned()
                };
                cx.host_copies.push(crate::exec::HostCopy {
                    addr: h.data.as_ptr() as usize,
                    len: h.data.len(),
                    id: *vid,
                    lasting,
                    gpu,
                });
            }
        }
    }

    /// Keeps the GPU copies of host values the step's op made (see [`Self::offer_host_copies`]).
    fn keep_host_copies(&self, cx: &mut Ctx<'_>, run_copies: &mut HashMap<usize, GpuTensor>) {
        for c in cx.host_copies.drain(..) {
            match c.gpu {
                Some(g) if c.lasting => {
                    self.const_copies.borrow_mut()[c.id].get_or_insert(g);
                }
                Some(g) => {
                    run_copies.entry(c.id).or_insert(g);
                }
                None => {}
            }
        }
    }

    /// Reads a value back to the host (counted in `bytes_read_back`).
    pub async fn read(&self, v: &Value) -> Result<HostTensor> {
        let mut cx = Ctx::new(
            &self.gpu,
            self.pool.clone(),
            &self.meta_buf,
            &self.bind_groups,
        );
        cx.to_host(v).await
    }

    /// A recording context on this session's GPU, buffer pool and parameter arena, for callers'
    /// own kernels on the session's outputs (e.g. sampling the next token from GPU logits).
    /// Work recorded into it is submitted by [`Ctx::flush`] or [`Ctx::download`]; tensors it
    /// allocates return to this session's pool when dropped.
    pub fn context(&self) -> Ctx<'_> {
        Ctx::new(
            &self.gpu,
            self.pool.clone(),
            &self.meta_buf,
            &self.bind_groups,
        )
    }

    /// Runs with host inputs and reads every output back.
    pub async fn run_host(
        &self,
        inputs: Vec<(String, HostTensor)>,
    ) -> Result<Vec<(String, HostTensor)>> {
        let outs = self
            .run(
                inputs
                    .into_iter()
                    .map(|(n, t)| (n, Value::Host(t)))
                    .collect(),
            )
            .await?;
        let mut res = Vec::with_capacity(outs.len());
        for (n, v) in outs {
            let h = self.read(&v).await?;
            res.push((n, h));
        }
        Ok(res)
    }
}

fn fmt_dims(d: &[Dim]) -> String {
    d.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
