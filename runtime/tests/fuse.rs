//! The fusion pass (src/fuse/): on hand-built Gemma-shaped subgraphs, a fused and an unfused
//! session give the same outputs within f32 tolerance, for one row (the fused kernel) and for
//! several rows (the fused node's fallback), and the pass leaves a group alone when a guard fails.

mod common;

use common::attr_i;

use gg_runtime::model::{Graph, InitData, Initializer, Node, ValueInfo};
use gg_runtime::ops::elementwise::HOST_CAST_MAX;
use gg_runtime::proto;
use gg_runtime::source::MemorySource;
use gg_runtime::{DType, Gpu, HostTensor, Session, SessionOptions, Tuning, Value};
use std::collections::BTreeMap;
use std::rc::Rc;

const K: usize = 96; // three blocks of 32 (odd block count: the packed zero points have a pad)
const BLOCK: usize = 32;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn byte(&mut self) -> u8 {
        self.next();
        (self.0 >> 33) as u8
    }
}

#[derive(Default)]
struct G {
    nodes: Vec<Node>,
    inits: Vec<Initializer>,
    inputs: Vec<ValueInfo>,
    outputs: Vec<ValueInfo>,
}

fn attr_f(name: &str, v: f32) -> proto::AttributeProto {
    proto::AttributeProto {
        name: Some(name.into()),
        f: Some(v),
        r#type: Some(proto::attribute_proto::AttributeType::Float as i32),
        ..Default::default()
    }
}
fn attr_s(name: &str, v: &str) -> proto::AttributeProto {
    proto::AttributeProto {
        name: Some(name.into()),
        s: Some(v.as_bytes().to_vec()),
        r#type: Some(proto::attribute_proto::AttributeType::String as i32),
        ..Default::default()
    }
}

impl G {
    fn node(
        &mut self,
        op: &str,
        domain: &str,
        ins: &[&str],
        out: &str,
        attributes: Vec<proto::AttributeProto>,
    ) -> String {
        self.nodes.push(Node {
            name: format!("n{}_{op}", self.nodes.len()),
            op_type: op.into(),
            domain: domain.into(),
            inputs: ins.iter().map(|s| s.to_string()).collect(),
            outputs: vec![out.into()],
            attributes,
        });
        out.into()
    }
    fn init(&mut self, name: &str, dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> String {
        self.inits.push(Initializer {
            name: name.into(),
            dtype,
            shape,
            data: InitData::Inline(data),
        });
        name.into()
    }
    fn f32s(&mut self, name: &str, shape: Vec<usize>, v: Vec<f32>) -> String {
        let data = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.init(name, DType::F32, shape, data)
    }
    fn norm(&mut self, x: &str, out: &str, rng: &mut Rng) -> String {
        let g: Vec<f32> = (0..K).map(|_| 1.0 + 0.3 * rng.next()).collect();
        let g = self.f32s(&format!("{out}.gamma"), vec![K], g);
        self.node(
            "SimplifiedLayerNormalization",
            "",
            &[x, &g],
            out,
            vec![
                attr_f("epsilon", 1e-6),
                attr_i("axis", -1),
                attr_i("stash_type", 1),
            ],
        )
    }
    fn mnb(&mut self, x: &str, out: &str, n: usize, rng: &mut Rng) -> String {
        let nb = K.div_ceil(BLOCK);
        let q: Vec<u8> = (0..n * nb * BLOCK / 2).map(|_| rng.byte()).collect();
        let s: Vec<f32> = (0..n * nb).map(|_| 0.02 + 0.01 * rng.next()).collect();
        let z: Vec<u8> = (0..n * nb.div_ceil(2)).map(|_| rng.byte()).collect();
        let q = self.init(&format!("{out}.q"), DType::U8, vec![n, nb, BLOCK / 2], q);
        let s = self.f32s(&format!("{out}.s"), vec![n, nb], s);
        let z = self.init(&format!("{out}.z"), DType::U8, vec![n, nb.div_ceil(2)], z);
        self.node(
            "MatMulNBits",
            "com.microsoft",
            &[x, &q, &s, &z],
            out,
            vec![
                attr_i("K", K as i64),
                attr_i("N", n as i64),
                attr_i("bits", 4),
                attr_i("block_size", BLOCK as i64),
            ],
        )
    }
    fn gelu(&mut self, x: &str, out: &str) -> String {
        self.node("Gelu", "", &[x], out, vec![attr_s("approximate", "tanh")])
    }
    fn input(&mut self, name: &str) {
        self.inputs.push(ValueInfo {
            name: name.into(),
            elem_type: 1,
            dims: None,
        });
    }
    fn output(&mut self, name: &str) {
        self.outputs.push(ValueInfo {
            name: name.into(),
            elem_type: 1,
            dims: None,
        });
    }
    fn graph(self) -> Graph {
        Graph {
            inputs: self.inputs,
            outputs: self.outputs,
            initializers: self.inits,
            nodes: self.nodes,
            opsets: BTreeMap::from([("".to_string(), 21), ("com.microsoft".to_string(), 1)]),
            inlined: Vec::new(),
        }
    }
}

/// One Gemma 4 decoder layer's MLP and per-layer-input parts:
/// h = (res + norm(o)) ; m = gelu(gate(norm(h))) * up(norm(h)) ; d = down(m) ;
/// h2 = h + norm(d) ; p = gelu(pli_gate(h2)) * Gather(per_layer, 1, axis 2) ;
/// h3 = (h2 + norm(proj(p))) * scalar ; q, k, v = (norm(h3) @ Wq, Wk, Wv).
/// `expose` names intermediate values to make graph outputs as well (guards).
fn layer(expose: &[&str]) -> Graph {
    layer_w(expose, 64)
}

/// `layer` with an MLP `w` wide.
fn layer_w(expose: &[&str], w: usize) -> Graph {
    let mut rng = Rng(7);
    let mut g = G::default();
    for i in ["o", "res", "per_layer"] {
        g.input(i);
    }
    let on = g.norm("o", "on", &mut rng);
    let h = g.node("Add", "", &["res", &on], "h", vec![]);
    let hn = g.norm(&h, "hn", &mut rng);
    let gate = g.mnb(&hn, "gate", w, &mut rng);
    let up = g.mnb(&hn, "up", w, &mut rng);
    let ge = g.gelu(&gate, "gelu");
    let m = g.node("Mul", "", &[&ge, &up], "m", vec![]);
    let down = mnb_k(&mut g, &m, "down", w, K, &mut rng);
    let dn = g.norm(&down, "dn", &mut rng);
    let h2 = g.node("Add", "", &[&h, &dn], "h2", vec![]);
    let pg = g.mnb(&h2, "pgate", 32, &mut rng);
    let pge = g.gelu(&pg, "pgelu");
    let idx = g.init("idx", DType::I64, vec![], 1i64.to_le_bytes().to_vec());
    let pli = g.node(
        "Gather",
        "",
        &["per_layer", &idx],
        "pli",
        vec![attr_i("axis", 2)],
    );
    let p = g.node("Mul", "", &[&pge, &pli], "p", vec![]);
    let proj = mnb_k(&mut g, &p, "proj", 32, K, &mut rng);
    let pn = g.norm(&proj, "pn", &mut rng);
    let h3a = g.node("Add", "", &[&h2, &pn], "h3a", vec![]);
    let sc = g.f32s("scalar", vec![1], vec![0.75]);
    let h3 = g.node("Mul", "", &[&h3a, &sc], "h3", vec![]);
    let h3n = g.norm(&h3, "h3n", &mut rng);
    for (name, n) in [("q", 64), ("k", 32), ("v", 32)] {
        let y = g.mnb(&h3n, name, n, &mut rng);
        g.output(&y);
    }
    g.output("h3");
    for e in expose {
        g.output(e);
    }
    g.graph()
}

/// A MatMulNBits with its own K.
fn mnb_k(g: &mut G, x: &str, out: &str, k: usize, n: usize, rng: &mut Rng) -> String {
    let nb = k.div_ceil(BLOCK);
    let q: Vec<u8> = (0..n * nb * BLOCK / 2).map(|_| rng.byte()).collect();
    let s: Vec<f32> = (0..n * nb).map(|_| 0.02 + 0.01 * rng.next()).collect();
    let q = g.init(&format!("{out}.q"), DType::U8, vec![n, nb, BLOCK / 2], q);
    let s = g.f32s(&format!("{out}.s"), vec![n, nb], s);
    g.node(
        "MatMulNBits",
        "com.microsoft",
        &[x, &q, &s],
        out,
        vec![
            attr_i("K", k as i64),
            attr_i("N", n as i64),
            attr_i("bits", 4),
            attr_i("block_size", BLOCK as i64),
        ],
    )
}

fn session(gpu: &Rc<Gpu>, graph: Graph, fuse: bool) -> Session {
    pollster::block_on(Session::from_graph_with(
        gpu.clone(),
        graph,
        &MemorySource::new(),
        SessionOptions { fuse },
    ))
    .expect("loads")
}

fn layer_inputs(rows: usize) -> Vec<(String, Value)> {
    let mut rng = Rng(99);
    let mut t = |shape: Vec<usize>| {
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.next()).collect();
        Value::Host(HostTensor::from_f32(shape, &v))
    };
    vec![
        ("o".to_string(), t(vec![1, rows, K])),
        ("res".to_string(), t(vec![1, rows, K])),
        ("per_layer".to_string(), t(vec![1, rows, 3, 32])),
    ]
}

fn read_all(s: &Session, outs: Vec<(String, Value)>) -> Vec<(String, Vec<f32>)> {
    outs.into_iter()
        .map(|(n, v)| {
            let h = pollster::block_on(s.read(&v)).expect("reads");
            (n, h.to_f32())
        })
        .collect()
}

fn run(s: &Session, rows: usize) -> Vec<(String, Vec<f32>)> {
    let outs = pollster::block_on(s.run(layer_inputs(rows))).expect("runs");
    read_all(s, outs)
}

fn assert_close(a: &[(String, Vec<f32>)], b: &[(String, Vec<f32>)]) {
    assert_eq!(a.len(), b.len());
    for ((na, va), (nb, vb)) in a.iter().zip(b) {
        assert_eq!(na, nb);
        assert_eq!(va.len(), vb.len(), "{na}");
        for (i, (x, y)) in va.iter().zip(vb).enumerate() {
            assert!(
                (x - y).abs() <= 1e-4 + 1e-4 * y.abs(),
                "{na}[{i}]: fused {x} vs unfused {y}"
            );
        }
    }
}

fn gpu() -> Rc<Gpu> {
    Rc::new(pollster::block_on(Gpu::new(None)).expect("a GPU adapter (lavapipe natively)"))
}

/// The adapter with the fused GEMV's split for GPUs (8 threads per column) even where it is a
/// software adapter (which takes 1): both forms are tested on any machine.
fn gpu_as_hardware() -> Rc<Gpu> {
    Rc::new(common::as_hardware(
        pollster::block_on(Gpu::new(None)).expect("a GPU adapter (lavapipe natively)"),
    ))
}

#[test]
fn fused_and_unfused_sessions_agree() {
    // Natively the adapter has subgroups (lavapipe: 8 lanes): the norms' reductions and, with
    // 8 threads per column, the GEMV's column sums use them; both are run without too, and with
    // the weights read a word per load instead of 16 bytes (SwiftShader's form).
    let plain = Rc::new(common::without_wide_loads(common::open_without_subgroups()));
    let plain_hw = Rc::new(common::without_wide_loads(common::as_hardware(
        common::open_without_subgroups(),
    )));
    for gpu in [gpu(), gpu_as_hardware(), plain, plain_hw] {
        fused_and_unfused_sessions_agree_on(gpu);
    }
}

fn fused_and_unfused_sessions_agree_on(gpu: Rc<Gpu>) {
    let fused = session(&gpu, layer(&[]), true);
    let plain = session(&gpu, layer(&[]), false);
    let kinds: Vec<&str> = fused
        .fused()
        .iter()
        .map(|s| s.split(" at ").next().unwrap_or_default())
        .collect();
    assert_eq!(
        kinds,
        [
            "Fused[Norm+Add+Norm+2xMatMulNBits+Gelu+Mul]",
            "Fused[1xMatMulNBits]",
            "Fused[Norm+Add+1xMatMulNBits+Gelu+Gather+Mul]",
            "Fused[1xMatMulNBits]",
            "Fused[Norm+Add+Mul+Norm+3xMatMulNBits]",
        ],
        "{:?}",
        fused.fused()
    );
    assert!(plain.fused().is_empty());
    for rows in [1, 3] {
        let before = gpu.counters.snapshot().dispatches;
        let a = run(&fused, rows);
        let mid = gpu.counters.snapshot().dispatches;
        let b = run(&plain, rows);
        let after = gpu.counters.snapshot().dispatches;
        assert_close(&a, &b);
        if rows == 1 {
            // 3 fused kernels + down + proj (f32: their own kernels) vs 21 nodes' worth.
            assert_eq!(mid - before, 5, "fused dispatches");
            assert!(after - mid > 15, "unfused dispatches {}", after - mid);
        } else {
            // Several rows: each group's prologue is one rows_prologue dispatch in place of its
            // norm / Add / Mul nodes (3, 2 and 4 of them), the rest runs unfused.
            assert_eq!(after - mid, 22, "unfused dispatches");
            assert_eq!(mid - before, 22 - 2 - 1 - 3, "fused dispatches");
        }
    }
}

/// The small initializers the session keeps on the host (the norms' gammas here) are uploaded
/// once, the first time a kernel needs them: a second run uploads only its inputs and creates
/// no buffer, fused or not.
#[test]
fn host_constants_are_uploaded_once() {
    let gpu = gpu();
    for fuse in [true, false] {
        let s = session(&gpu, layer(&[]), fuse);
        let first = run(&s, 1);
        let before = gpu.counters.snapshot();
        let second = run(&s, 1);
        let after = gpu.counters.snapshot();
        assert_close(&first, &second);
        // A run repeating the one before gets the same pooled buffers in the same order, so it
        // binds exactly what that run bound: no bind group is created.
        let third = run(&s, 1);
        assert_close(&first, &third);
        assert_eq!(
            gpu.counters.snapshot().bind_groups_created - after.bind_groups_created,
            0,
            "fuse {fuse}: bind groups created by the third run"
        );
        let inputs = (2 * K + 3 * 32) as u64 * 4;
        assert_eq!(
            after.bytes_uploaded - before.bytes_uploaded,
            inputs,
            "fuse {fuse}: bytes uploaded by the second run"
        );
        assert_eq!(
            after.buffers_created - before.buffers_created,
            0,
            "fuse {fuse}: buffers created by the second run"
        );
    }
}

/// A host value that several kernels read in one run (here an int64 index input of two
/// Gathers; in the decoder, the attention mask) is uploaded once per run.
#[test]
fn a_host_value_read_by_several_kernels_is_uploaded_once_per_run() {
    let gpu = gpu();
    let mut g = G::default();
    g.input("x");
    g.inputs.push(ValueInfo {
        name: "idx".into(),
        elem_type: DType::I64.to_onnx(),
        dims: None,
    });
    for (out, axis) in [("a", 0), ("b", 1)] {
        g.node("Gather", "", &["x", "idx"], out, vec![attr_i("axis", axis)]);
        g.output(out);
    }
    let s = session(&gpu, g.graph(), true);
    let x: Vec<f32> = (0..32).map(|i| i as f32).collect();
    for _ in 0..2 {
        let before = gpu.counters.snapshot().bytes_uploaded;
        let outs = pollster::block_on(s.run(vec![
            (
                "x".into(),
                Value::Host(HostTensor::from_f32(vec![4, 8], &x)),
            ),
            (
                "idx".into(),
                Value::Host(HostTensor::from_i64(vec![3], &[3, 0, 2])),
            ),
        ]))
        .expect("runs");
        // x (128 bytes) and the indices as i32 (12 bytes), once.
        assert_eq!(gpu.counters.snapshot().bytes_uploaded - before, 128 + 12);
        let a = pollster::block_on(s.read(&outs[0].1))
            .expect("reads")
            .to_f32();
        let b = pollster::block_on(s.read(&outs[1].1))
            .expect("reads")
            .to_f32();
        assert_eq!(&a[..8], &x[24..32]);
        assert_eq!(&b[..3], &[3.0, 0.0, 2.0]);
    }
}

/// A Cast of a host value runs on the host (mobius's float16 attention mask:
/// `Cast(Where(mask, 0, -65504), float16)`, all computed from the int64 attention mask): no
/// dispatch, the float16 value uploaded once for its reader, rounded to nearest even as ONNX
/// Runtime's Cast rounds (both ties below are exact halfway cases); past `HOST_CAST_MAX`
/// elements, by a kernel.
#[test]
fn a_cast_of_a_host_value_stays_on_the_host() {
    let gpu = gpu();
    let mut g = G::default();
    for (name, dtype) in [("mask", DType::I64), ("x", DType::F16)] {
        g.inputs.push(ValueInfo {
            name: name.into(),
            elem_type: dtype.to_onnx(),
            dims: None,
        });
    }
    // 1 + 3·2^-11 rounds up to 1 + 2^-9 (even), -(1 + 2^-11) down to -1.
    f16_mask(&mut g, -(1.0 + 1.0 / 2048.0));
    g.node("Add", "", &["x", "w16"], "y", vec![]);
    for out in ["w16", "y"] {
        g.outputs.push(ValueInfo {
            name: out.into(),
            elem_type: DType::F16.to_onnx(),
            dims: None,
        });
    }
    let graph = g.graph();
    // 0.5, 0.5, 2, 2 in float16
    let x: Vec<u8> = [0x3800u16, 0x3800, 0x4000, 0x4000]
        .iter()
        .flat_map(|b| b.to_le_bytes())
        .collect();
    for fuse in [true, false] {
        let s = session(&gpu, graph.clone(), fuse);
        for run in 0..2 {
            let before = gpu.counters.snapshot();
            let outs = pollster::block_on(s.run(vec![
                (
                    "mask".into(),
                    Value::Host(HostTensor::from_i64(vec![1, 4], &[1, 0, 1, 0])),
                ),
                (
                    "x".into(),
                    Value::Host(HostTensor::new(DType::F16, vec![1, 4], x.clone()).expect("f16")),
                ),
            ]))
            .expect("runs");
            let after = gpu.counters.snapshot();
            assert!(
                matches!(outs[0].1, Value::Host(_)),
                "fuse {fuse}: the cast mask is a host value"
            );
            assert_eq!(
                after.dispatches - before.dispatches,
                1,
                "fuse {fuse} run {run}: the Add only"
            );
            // x and the float16 mask, 8 bytes each
            assert_eq!(
                after.bytes_uploaded - before.bytes_uploaded,
                16,
                "fuse {fuse} run {run}"
            );
            let got = read_all(&s, outs);
            let (hi, lo) = (1.0 + 1.0 / 512.0, -1.0);
            assert_eq!(got[0].1, [hi, lo, hi, lo], "fuse {fuse}: the cast mask");
            assert_eq!(
                got[1].1,
                [0.5 + hi, 0.5 + lo, 2.0 + hi, 2.0 + lo],
                "fuse {fuse}"
            );
        }
    }
    // Up to HOST_CAST_MAX elements on the host; a longer mask (a long prompt's) is cast by a
    // kernel, to the same values.
    let mut g = G::default();
    g.inputs.push(ValueInfo {
        name: "mask".into(),
        elem_type: DType::I64.to_onnx(),
        dims: None,
    });
    f16_mask(&mut g, -65504.0);
    g.outputs.push(ValueInfo {
        name: "w16".into(),
        elem_type: DType::F16.to_onnx(),
        dims: None,
    });
    let s = session(&gpu, g.graph(), true);
    for (n, dispatches) in [(HOST_CAST_MAX, 0), (HOST_CAST_MAX + 1, 1)] {
        let mask: Vec<i64> = (0..n as i64).map(|i| i % 3 % 2).collect();
        let before = gpu.counters.snapshot().dispatches;
        let outs = pollster::block_on(s.run(vec![(
            "mask".into(),
            Value::Host(HostTensor::from_i64(vec![1, n], &mask)),
        )]))
        .expect("runs");
        assert_eq!(
            gpu.counters.snapshot().dispatches - before,
            dispatches,
            "{n} elements"
        );
        let got = read_all(&s, outs).remove(0).1;
        let want: Vec<f32> = mask
            .iter()
            .map(|&m| if m == 1 { 1.0 + 1.0 / 512.0 } else { -65504.0 })
            .collect();
        assert!(got == want, "{n} elements: the cast mask");
    }
}

/// mobius's float16 mask on the int64 input `mask`: `w16 = Cast(Where(Cast(mask, bool),
/// 1 + 3·2^-11, down), float16)`.
fn f16_mask(g: &mut G, down: f32) {
    let up = g.f32s("up", vec![], vec![1.0 + 3.0 / 2048.0]);
    let down = g.f32s("down", vec![], vec![down]);
    g.node("Cast", "", &["mask"], "c", vec![attr_i("to", 9)]);
    g.node("Where", "", &["c", &up, &down], "w", vec![]);
    g.node("Cast", "", &["w"], "w16", vec![attr_i("to", 10)]);
}

/// The host Cast and the GPU one give the same bits. The ONNX node suite's Cast cases check the
/// GPU path (a float input is uploaded when it is bound); here each cast also runs on a host
/// value (a small initializer stays on the host), over ties, subnormals, the ends of each range
/// and random values.
#[test]
fn host_and_gpu_casts_agree() {
    let gpu = gpu();
    let mut rng = Rng(7);
    let mut v: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0 + 1.0 / 2048.0,
        1.0 + 3.0 / 2048.0,
        -(1.0 + 5.0 / 2048.0),
        65504.0,
        -65504.0,
        65519.0,
        6.0e-5,
        1.0e-6,
        -3.0e-7,
        2.5,
        -2.5,
        -7.9,
        1.0e9,
        -2.1e9,
    ];
    v.extend((0..48).map(|i| rng.next() * [1.0, 100.0, 3.0e4, 1.0e-3][i % 4]));
    let n = v.len();
    let f32_in = HostTensor::from_f32(vec![n], &v);
    let f16_in = HostTensor::from_f64_as(
        DType::F16,
        vec![n],
        &v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(),
    );
    for (input, to) in [
        (&f32_in, DType::F16),
        (&f32_in, DType::I32),
        (&f32_in, DType::Bool),
        (&f16_in, DType::F32),
        (&f16_in, DType::I32),
    ] {
        let cast = |on_gpu: bool| {
            let mut g = G::default();
            let mut feeds = Vec::new();
            if on_gpu {
                g.inputs.push(ValueInfo {
                    name: "x".into(),
                    elem_type: input.dtype.to_onnx(),
                    dims: None,
                });
                feeds.push(("x".to_string(), Value::Host(input.clone())));
            } else {
                g.init("x", input.dtype, input.shape.clone(), input.data.clone());
            }
            g.node(
                "Cast",
                "",
                &["x"],
                "y",
                vec![attr_i("to", to.to_onnx().into())],
            );
            g.outputs.push(ValueInfo {
                name: "y".into(),
                elem_type: to.to_onnx(),
                dims: None,
            });
            let s = session(&gpu, g.graph(), false);
            let before = gpu.counters.snapshot().dispatches;
            let outs = pollster::block_on(s.run(feeds)).expect("runs");
            let dispatches = gpu.counters.snapshot().dispatches - before;
            assert_eq!(dispatches, u64::from(on_gpu), "{:?} -> {to:?}", input.dtype);
            pollster::block_on(s.read(&outs[0].1)).expect("reads")
        };
        let (host, dev) = (cast(false), cast(true));
        assert_eq!(host.dtype, to);
        let size = to.size();
        for (i, (h, d)) in host
            .data
            .chunks(size)
            .zip(dev.data.chunks(size))
            .enumerate()
        {
            // Out of an int's range the cast is undefined (ONNX): the host saturates, WGSL
            // clamps to the nearest f32 inside the range. float16's range ends at 65504.
            let x = HostTensor::new(
                input.dtype,
                vec![],
                input.data[i * input.dtype.size()..][..input.dtype.size()].to_vec(),
            )
            .expect("element")
            .to_f64()[0];
            if to == DType::I32 && x.abs() >= 2f64.powi(31) {
                continue;
            }
            assert_eq!(
                h, d,
                "{:?} -> {to:?} of {}: host {h:?}, GPU {d:?}",
                input.dtype, v[i]
            );
        }
    }
}

/// Two sessions recorded into one context (`Session::run_in`, as the generator records the
/// embedding, the decoder and the sampler) submit nothing until the context is read, then submit
/// once, and compute what separate runs compute. A context of another GPU device is refused.
#[test]
fn sessions_recorded_into_one_context_submit_once() {
    let gpu = gpu();
    let a = session(&gpu, layer(&[]), true);
    let b = session(&gpu, layer(&[]), false);
    let (want_a, want_b) = (run(&a, 1), run(&b, 2));
    let mut cx = b.context();
    let before = gpu.counters.snapshot();
    let outs_a = pollster::block_on(a.run_in(&mut cx, layer_inputs(1))).expect("records a");
    let outs_b = pollster::block_on(b.run_in(&mut cx, layer_inputs(2))).expect("records b");
    assert_eq!(
        gpu.counters.snapshot().submits,
        before.submits,
        "submits while recording"
    );
    let Value::Gpu(first) = &outs_b[0].1 else {
        panic!("output on the host")
    };
    pollster::block_on(cx.download(first)).expect("reads");
    let after = gpu.counters.snapshot();
    assert_eq!(after.submits - before.submits, 1, "submits");
    drop(cx);
    assert_close(&read_all(&a, outs_a), &want_a);
    assert_close(&read_all(&b, outs_b), &want_b);

    let other = self::gpu();
    let c = session(&other, layer(&[]), true);
    let mut cx = b.context();
    let err = pollster::block_on(c.run_in(&mut cx, layer_inputs(1))).expect_err("another GPU");
    assert!(err.to_string().contains("another GPU device"), "{err}");
}

#[test]
fn guards_keep_groups_with_outside_readers_unfused() {
    let gpu = gpu();
    // The MLP's normalised input, the gelu output and the per-layer slice are also graph outputs.
    let exposed = ["hn", "pgelu", "pli"];
    let fused = session(&gpu, layer(&exposed), true);
    let plain = session(&gpu, layer(&exposed), false);
    let kinds: Vec<&str> = fused
        .fused()
        .iter()
        .map(|s| s.split(" at ").next().unwrap_or_default())
        .collect();
    // gate/up still share their input but not its norm, and no epilogue is taken; the per-layer
    // gate keeps its residual prologue only; q/k/v are unaffected. The first residual step
    // (`h = res + norm(o)`, no longer a prologue) is a norm with an Add tail.
    assert_eq!(
        kinds,
        [
            "Fused[2xMatMulNBits+Gelu+Mul]",
            "Fused[1xMatMulNBits]",
            "Fused[Norm+Add+1xMatMulNBits]",
            "Fused[1xMatMulNBits]",
            "Fused[Norm+Add+Mul+Norm+3xMatMulNBits]",
            "Fused[1xSimplifiedLayerNormalization+Add]",
        ],
        "{:?}",
        fused.fused()
    );
    for rows in [1, 2] {
        assert_close(&run(&fused, rows), &run(&plain, rows));
    }
}

/// Inputs of a Gemma 4 decoder step: `s` new tokens after `p` cached ones (random embeddings and
/// cache, all positions visible).
fn decoder_inputs(s: &Session, new: usize, past: usize, seed: u64) -> Vec<(String, Value)> {
    let mut rng = Rng(seed);
    let total = new + past;
    let mut out = Vec::new();
    for i in &s.graph.inputs {
        let dims = i.dims.clone().unwrap_or_default();
        let shape: Vec<usize> = dims
            .iter()
            .map(|d| match d {
                gg_runtime::model::Dim::Fixed(v) => *v as usize,
                gg_runtime::model::Dim::Param(p) if p.contains("total") => total,
                gg_runtime::model::Dim::Param(p) if p.contains("past") => past,
                gg_runtime::model::Dim::Param(p) if p.contains("sequence") => new,
                _ => 1,
            })
            .collect();
        let v = match i.name.as_str() {
            "attention_mask" => HostTensor::from_i64(shape, &vec![1; total]),
            "position_ids" => {
                HostTensor::from_i64(shape, &(past as i64..total as i64).collect::<Vec<_>>())
            }
            "num_logits_to_keep" => HostTensor::from_i64(vec![], &[1]),
            _ => {
                let n: usize = shape.iter().product();
                let v: Vec<f32> = (0..n).map(|_| rng.next()).collect();
                let t = HostTensor::from_f32(shape.clone(), &v);
                if i.dtype().expect("dtype") == DType::F16 {
                    HostTensor::new(DType::F16, shape, gg_runtime::exec::f16_bytes(&v))
                        .expect("f16")
                } else {
                    t
                }
            }
        };
        out.push((i.name.clone(), Value::Host(v)));
    }
    out
}

/// The KV-shared layers of the real Gemma 4 exporter graph (tiny fixture: layers 4 and 5 read
/// layer 3's cache) become one fused attention node each, their rotary tables one node per
/// position set, and fused and unfused sessions give the same logits and caches for a prompt and
/// for decode steps (a short and a split long context).
#[test]
fn kv_shared_attention_on_the_gemma4_graph() {
    let gpu = gpu();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/models/gemma4-tiny/onnx");
    for (file, tol) in [
        ("decoder_model_merged_q4.onnx", 1e-4f32),
        ("decoder_model_merged_q4f16.onnx", 2e-2),
    ] {
        let path = dir.join(file);
        let graph = Graph::decode(&std::fs::read(&path).expect("model"), file).expect("decodes");
        let load = |fuse: bool| {
            pollster::block_on(Session::from_graph_with(
                gpu.clone(),
                graph.clone(),
                &gg_runtime::source::DirSource::new(&dir),
                SessionOptions { fuse },
            ))
            .expect("loads")
        };
        let (fused, plain) = (load(true), load(false));
        let shared: Vec<&String> = fused
            .fused()
            .iter()
            .filter(|s| s.contains("SharedKVAttention"))
            .collect();
        assert_eq!(shared.len(), 2, "{file}: {:?}", fused.fused());
        assert!(shared[0].starts_with("Fused[Norm+Rotary+SharedKVAttention] at /model/layers.4/"));
        // Their cos/sin tables (local and global rotary): one dispatch per position set.
        let tables = fused
            .fused()
            .iter()
            .filter(|s| s.starts_with("Fused[2x(Gather+Concat)]"))
            .count();
        assert_eq!(tables, 2, "{file}: {:?}", fused.fused());
        for (new, past) in [(5, 0), (1, 9), (3, 300)] {
            let run = |s: &Session| {
                let outs =
                    pollster::block_on(s.run(decoder_inputs(s, new, past, 7))).expect("runs");
                outs.into_iter()
                    .map(|(n, v)| (n, pollster::block_on(s.read(&v)).expect("reads").to_f32()))
                    .collect::<Vec<_>>()
            };
            let before = gpu.counters.snapshot().dispatches;
            let a = run(&fused);
            let mid = gpu.counters.snapshot().dispatches;
            let b = run(&plain);
            let after = gpu.counters.snapshot().dispatches;
            assert!(
                mid - before < after - mid,
                "{file}: fused {} vs {}",
                mid - before,
                after - mid
            );
            assert_eq!(a.len(), b.len());
            for ((na, va), (_, vb)) in a.iter().zip(&b) {
                let scale = vb.iter().fold(0f32, |m, v| m.max(v.abs())).max(1.0);
                let worst = va
                    .iter()
                    .zip(vb)
                    .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
                assert!(
                    worst <= tol * scale,
                    "{file} new {new} past {past} {na}: max |fused - unfused| {worst} (scale {scale})"
                );
            }
        }
    }
}

/// Gemma's model-level heads: the logit softcap `Mul(Tanh(Div(lm(o), c)), c2)` and the per-layer
/// input chain `(norm(Reshape(plp(res) * s)) + per_layer) * t`. `expose` names intermediate values
/// to make graph outputs as well (guards); `c2` is the softcap's multiplier (the divisor is 0.5).
fn heads(expose: &[&str], c2: f32) -> Graph {
    heads_w(expose, c2, 64)
}

/// `heads` with a vocabulary of `lm`.
fn heads_w(expose: &[&str], c2: f32, lm: usize) -> Graph {
    let mut rng = Rng(11);
    let mut g = G::default();
    for i in ["o", "res", "per_layer"] {
        g.input(i);
    }
    let y = g.mnb("o", "lm", lm, &mut rng);
    let c = g.f32s("cap", vec![], vec![0.5]);
    let c2 = if c2 == 0.5 {
        // Same value, another initializer: equal by bytes.
        g.f32s("cap2", vec![], vec![0.5])
    } else {
        g.f32s("cap2", vec![], vec![c2])
    };
    let d = g.node("Div", "", &[&y, &c], "capd", vec![]);
    let t = g.node("Tanh", "", &[&d], "capt", vec![]);
    let logits = g.node("Mul", "", &[&c2, &t], "logits", vec![]);
    g.output(&logits);
    let p = g.mnb("res", "plp", 96, &mut rng);
    let s = g.f32s("pscale", vec![], vec![0.125]);
    let pm = g.node("Mul", "", &[&p, &s], "pm", vec![]);
    let shape: Vec<u8> = [0i64, 0, 3, 32]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let shape = g.init("pshape", DType::I64, vec![4], shape);
    let pr = g.node("Reshape", "", &[&pm, &shape], "pr", vec![]);
    let gamma: Vec<f32> = (0..32).map(|_| 1.0 + 0.3 * rng.next()).collect();
    let gamma = g.f32s("pgamma", vec![32], gamma);
    let pn = g.node(
        "SimplifiedLayerNormalization",
        "",
        &[&pr, &gamma],
        "pn",
        vec![attr_f("epsilon", 1e-6), attr_i("axis", -1)],
    );
    let pa = g.node("Add", "", &["per_layer", &pn], "pa", vec![]);
    let ps = g.f32s("pls", vec![1], vec![std::f32::consts::FRAC_1_SQRT_2]);
    let pli = g.node("Mul", "", &[&pa, &ps], "pli", vec![]);
    g.output(&pli);
    for e in expose {
        g.output(e);
    }
    g.graph()
}

fn kinds(s: &Session) -> Vec<String> {
    s.fused()
        .iter()
        .map(|s| s.split(" at ").next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn softcap_and_per_layer_input_epilogues_agree_with_the_unfused_graph() {
    let gpu = gpu();
    let fused = session(&gpu, heads(&[], 0.5), true);
    let plain = session(&gpu, heads(&[], 0.5), false);
    assert_eq!(
        kinds(&fused),
        [
            "Fused[1xMatMulNBits+Div+Tanh+Mul]",
            "Fused[1xMatMulNBits+Mul]",
            "Fused[1xSimplifiedLayerNormalization+Add+Mul]",
        ],
        "{:?}",
        fused.fused()
    );
    for rows in [1, 3] {
        let before = gpu.counters.snapshot().dispatches;
        let a = run(&fused, rows);
        let mid = gpu.counters.snapshot().dispatches;
        let b = run(&plain, rows);
        let after = gpu.counters.snapshot().dispatches;
        assert_close(&a, &b);
        // The softcap is not a no-op here: some logits are well inside its nonlinear range.
        assert!(a[0].1.iter().any(|v| v.abs() > 0.25), "{:?}", &a[0].1[..8]);
        if rows == 1 {
            assert_eq!(mid - before, 3, "fused dispatches");
            assert!(after - mid >= 8, "unfused dispatches {}", after - mid);
        }
    }
}

#[test]
fn softcap_and_norm_tail_guards() {
    let gpu = gpu();
    // Intermediates that are graph outputs too: the softcap's Div, the projection before its
    // scale, and the Add (its Mul stays outside, the Add is still a tail).
    let exposed = ["capd", "plp", "pa"];
    let fused = session(&gpu, heads(&exposed, 0.5), true);
    let plain = session(&gpu, heads(&exposed, 0.5), false);
    assert_eq!(
        kinds(&fused),
        [
            "Fused[1xMatMulNBits]",
            "Fused[1xMatMulNBits]",
            "Fused[1xSimplifiedLayerNormalization+Add]",
        ],
        "{:?}",
        fused.fused()
    );
    for rows in [1, 2] {
        assert_close(&run(&fused, rows), &run(&plain, rows));
    }
    // The norm's own output read elsewhere: no tail (and an f32 norm alone is not fused).
    let fused = session(&gpu, heads(&["pn"], 0.5), true);
    assert!(
        kinds(&fused).iter().all(|k| !k.contains("Normalization")),
        "{:?}",
        fused.fused()
    );
    // A multiplier that differs from the divisor is no softcap.
    let fused = session(&gpu, heads(&[], 0.25), true);
    let plain = session(&gpu, heads(&[], 0.25), false);
    assert_eq!(
        kinds(&fused)[0],
        "Fused[1xMatMulNBits]",
        "{:?}",
        fused.fused()
    );
    assert_close(&run(&fused, 1), &run(&plain, 1));
}

#[test]
fn epilogues_of_weights_split_across_buffers() {
    // Weights above 1200 bytes are split by rows (25 rows of 48 bytes per part; the scales stay
    // whole): the lone GEMVs run one dispatch per part.
    let mut small = pollster::block_on(Gpu::new(None)).expect("a GPU adapter");
    small.max_weight_part = 1200;
    let small = Rc::new(small);
    let fused = session(&small, heads(&[], 0.5), true);
    assert_eq!(fused.split_weights(), 2);
    let gpu = gpu();
    let plain = session(&gpu, heads(&[], 0.5), false);
    for rows in [1, 2] {
        let before = small.counters.snapshot().dispatches;
        let a = run(&fused, rows);
        let after = small.counters.snapshot().dispatches;
        assert_close(&a, &run(&plain, rows));
        if rows == 1 {
            // lm_head: 3 parts, the projection: 4 parts, the norm: 1.
            assert_eq!(after - before, 8, "fused dispatches");
        }
    }
}

#[test]
fn wide_outputs_take_several_columns_per_invocation() {
    // From 512 workgroups' worth of columns (GPUs; 4 on software adapters) an invocation of the
    // fused GEMV computes 2, 4 or 8 columns at once (REPS); widths that leave the last column
    // groups partial, a wide gate/up pair, and a wide vocabulary split across buffers (each
    // part's last columns clamped). With 8 threads per column (GPUs) and with 1 (software
    // adapters: 64 columns a workgroup), the weights read 16 bytes per load and a word per load.
    for (software, wide) in [(false, true), (true, true), (true, false)] {
        wide_outputs_on(software, wide);
    }
}

fn wide_outputs_on(software: bool, wide: bool) {
    let tuned = || {
        pollster::block_on(Gpu::with_tuning(None, |a| {
            Ok(Tuning {
                software,
                wide_weight_loads: wide,
                ..Tuning::from_env(a)?
            })
        }))
        .expect("a GPU adapter")
    };
    let gpu = Rc::new(tuned());
    // (GPUs: 8 columns a workgroup, REPS exceeds 1 from 8192 columns. Software adapters: 64
    // columns a workgroup, REPS 2 from 512 columns, 4 from 1024, 8 from 1536.)
    let lms: &[usize] = if software {
        &[600, 1100, 8200, 70000]
    } else {
        &[8200, 12300, 40000]
    };
    for &lm in lms {
        let fused = session(&gpu, heads_w(&[], 0.5, lm), true);
        let plain = session(&gpu, heads_w(&[], 0.5, lm), false);
        assert_eq!(kinds(&fused)[0], "Fused[1xMatMulNBits+Div+Tanh+Mul]");
        let before = gpu.counters.snapshot().dispatches;
        let a = run(&fused, 1);
        assert_eq!(gpu.counters.snapshot().dispatches - before, 3, "lm {lm}");
        assert_close(&a, &run(&plain, 1));
    }
    let fused = session(&gpu, layer_w(&[], 12300), true);
    let plain = session(&gpu, layer_w(&[], 12300), false);
    assert_eq!(
        kinds(&fused)[0],
        "Fused[Norm+Add+Norm+2xMatMulNBits+Gelu+Mul]"
    );
    assert_close(&run(&fused, 1), &run(&plain, 1));
    // 5000 rows of 48 bytes per part: the vocabulary in parts of 5000, 5000, 2300.
    let mut small = tuned();
    small.max_weight_part = 48 * 5000;
    let small = Rc::new(small);
    let fused = session(&small, heads_w(&[], 0.5, 12300), true);
    let plain = session(&gpu, heads_w(&[], 0.5, 12300), false);
    assert!(fused.split_weights() >= 1);
    assert_close(&run(&fused, 1), &run(&plain, 1));
}

/// The q4f16 form of the per-layer input tail: f16 activations, the norm between Casts and the
/// added input cast from float: `(norm(Reshape(f16(res))) + f16(per_layer)) * s`, `s` float16.
fn f16_tail(expose: &[&str]) -> Graph {
    let mut rng = Rng(5);
    let mut g = G::default();
    for i in ["o", "res", "per_layer"] {
        g.input(i);
    }
    let to = |t: i64| vec![attr_i("to", t)];
    let r16 = g.node("Cast", "", &["res"], "r16", to(10));
    let shape: Vec<u8> = [0i64, 0, 3, 32]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let shape = g.init("shape", DType::I64, vec![4], shape);
    let rr = g.node("Reshape", "", &[&r16, &shape], "rr", vec![]);
    let r32 = g.node("Cast", "", &[&rr], "r32", to(1));
    let gamma: Vec<f32> = (0..32).map(|_| 1.0 + 0.3 * rng.next()).collect();
    let gamma = g.f32s("gamma", vec![32], gamma);
    let n32 = g.node(
        "SimplifiedLayerNormalization",
        "",
        &[&r32, &gamma],
        "n32",
        vec![attr_f("epsilon", 1e-6), attr_i("axis", -1)],
    );
    let n16 = g.node("Cast", "", &[&n32], "n16", to(10));
    let p16 = g.node("Cast", "", &["per_layer"], "p16", to(10));
    let a = g.node("Add", "", &[&n16, &p16], "a", vec![]);
    // 0.75 as float16.
    let s = g.init("s", DType::F16, vec![], 0x3a00u16.to_le_bytes().to_vec());
    let m = g.node("Mul", "", &[&a, &s], "m", vec![]);
    let out = g.node("Cast", "", &[&m], "out", to(1));
    g.output(&out);
    for e in expose {
        let o = g.node("Cast", "", &[e], &format!("{e}.f32"), to(1));
        g.output(&o);
    }
    g.graph()
}

#[test]
fn f16_norm_tail_folds_the_cast_of_its_added_input() {
    let gpu = gpu();
    for (expose, kind) in [
        (
            &[][..],
            "Fused[1xSimplifiedLayerNormalization+Cast+Add+Mul]",
        ),
        // The cast input is read elsewhere too: it stays a node of its own.
        (
            &["p16"][..],
            "Fused[1xSimplifiedLayerNormalization+Add+Mul]",
        ),
    ] {
        let fused = session(&gpu, f16_tail(expose), true);
        let plain = session(&gpu, f16_tail(expose), false);
        assert_eq!(kinds(&fused), [kind], "{:?}", fused.fused());
        for rows in [1, 2] {
            assert_close(&run(&fused, rows), &run(&plain, rows));
        }
    }
}

/// On adapters with fewer storage buffers per stage (WebGPU's default is 8, Chrome's SwiftShader
/// offers 10), a group's weights are packed (bits, scales and zero points in one buffer) and
/// its separate results written through one binding, so that with 10 every group of the layer
/// forms whole, as with no limit, and runs as many dispatches; with 8 the lone per-layer gate
/// (with its residual prologue and the gathered input: 9 storage buffers unpacked) has its one
/// weight packed too and also forms whole. With 6, groups are narrowed to fit — residual
/// prologue, norm prologue, epilogue, then weights are left out — instead of not being formed
/// at all. Every form agrees with the unfused graph.
#[test]
fn groups_are_narrowed_to_fit_fewer_storage_buffers() {
    let wide = gpu();
    let unlimited = session(&wide, layer(&[]), true);
    let whole = &[
        "Fused[Norm+Add+Norm+2xMatMulNBits+Gelu+Mul]",
        "Fused[1xMatMulNBits]",
        "Fused[Norm+Add+1xMatMulNBits+Gelu+Gather+Mul]",
        "Fused[1xMatMulNBits]",
        "Fused[Norm+Add+Mul+Norm+3xMatMulNBits]",
    ][..];
    // q/k/v (3 weights x 3 kinds) and gate/up (2 x 3); with 8 or 6 also the lone per-layer
    // gate's 3 (it would not fit unpacked).
    for (limit, want, packed) in [
        (10, whole, 15),
        (8, whole, 18),
        (
            6,
            &[
                "Fused[Norm+2xMatMulNBits+Gelu+Mul]",
                "Fused[1xMatMulNBits]",
                "Fused[1xMatMulNBits+Gelu+Gather+Mul]",
                "Fused[1xMatMulNBits]",
                "Fused[Norm+3xMatMulNBits]",
                "Fused[1xSimplifiedLayerNormalization+Add]",
                "Fused[1xSimplifiedLayerNormalization+Add]",
                "Fused[1xSimplifiedLayerNormalization+Add+Mul]",
            ][..],
            18,
        ),
    ] {
        let mut g = pollster::block_on(Gpu::new(None)).expect("a GPU adapter");
        g.limits.max_storage_buffers_per_shader_stage = limit;
        let gpu = Rc::new(g);
        let fused = session(&gpu, layer(&[]), true);
        let plain = session(&gpu, layer(&[]), false);
        let kinds: Vec<&str> = fused
            .fused()
            .iter()
            .map(|s| s.split(" at ").next().unwrap_or_default())
            .collect();
        assert_eq!(kinds, want, "{limit} storage buffers: {:?}", fused.fused());
        assert_eq!(fused.packed_weights(), packed, "{limit}");
        for rows in [1, 3] {
            let before = gpu.counters.snapshot().dispatches;
            let a = run(&fused, rows);
            let mid = gpu.counters.snapshot().dispatches;
            let b = run(&plain, rows);
            let after = gpu.counters.snapshot().dispatches;
            assert_close(&a, &b);
            if rows == 1 {
                assert!(
                    mid - before < after - mid,
                    "{limit}: {} vs {}",
                    mid - before,
                    after - mid
                );
                if limit >= 8 {
                    let w0 = wide.counters.snapshot().dispatches;
                    assert_close(&run(&unlimited, rows), &b);
                    let w = wide.counters.snapshot().dispatches - w0;
                    assert_eq!(mid - before, w, "{limit} storage buffers vs no limit");
                }
            }
        }
    }
}

/// The mobius exporter writes every norm as ai.onnx 23 `RMSNormalization`: the Gemma 4 graph with
/// its 46 `SimplifiedLayerNormalization` nodes renamed to `RMSNormalization` (same attributes:
/// `axis`, `epsilon`, `stash_type`) fuses into the same groups and decodes with the same dispatch
/// count and the same results as the original, for a prompt and for decode steps.
#[test]
fn rms_normalization_fuses_like_simplified_layer_normalization() {
    let gpu = gpu();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/models/gemma4-tiny/onnx");
    for file in [
        "decoder_model_merged_q4.onnx",
        "decoder_model_merged_q4f16.onnx",
    ] {
        let sln =
            Graph::decode(&std::fs::read(dir.join(file)).expect("model"), file).expect("decodes");
        let mut rms = sln.clone();
        let mut renamed = 0;
        for n in &mut rms.nodes {
            if n.op_type == "SimplifiedLayerNormalization" && n.domain.is_empty() {
                // RMSNormalization has one output (the fixture's norms have only `Y` too).
                assert_eq!(n.outputs.len(), 1, "{}", n.name);
                n.op_type = "RMSNormalization".into();
                renamed += 1;
            }
        }
        assert_eq!(renamed, 46, "{file}");
        let v = rms.opsets.entry(String::new()).or_insert(23);
        *v = (*v).max(23);
        let load = |graph: &Graph| {
            pollster::block_on(Session::from_graph_with(
                gpu.clone(),
                graph.clone(),
                &gg_runtime::source::DirSource::new(&dir),
                SessionOptions { fuse: true },
            ))
            .expect("loads")
        };
        let (a, b) = (load(&sln), load(&rms));
        let kinds_b: Vec<String> = b
            .fused()
            .iter()
            .map(|k| k.replace("RMSNormalization", "SimplifiedLayerNormalization"))
            .collect();
        assert_eq!(a.fused(), &kinds_b[..], "{file}: the same fused groups");
        assert!(
            b.fused().iter().any(|k| k.contains("xRMSNormalization")),
            "{file}: {:?}",
            b.fused()
        );
        for (new, past) in [(5, 0), (1, 9), (1, 300)] {
            let run = |s: &Session| {
                let before = gpu.counters.snapshot().dispatches;
                let outs =
                    pollster::block_on(s.run(decoder_inputs(s, new, past, 11))).expect("runs");
                let n = gpu.counters.snapshot().dispatches - before;
                let v: Vec<(String, Vec<f32>)> = outs
                    .into_iter()
                    .map(|(n, v)| (n, pollster::block_on(s.read(&v)).expect("reads").to_f32()))
                    .collect();
                (n, v)
            };
            let (da, va) = run(&a);
            let (db, vb) = run(&b);
            eprintln!(
                "{file} new {new} past {past}: dispatches SimplifiedLayerNormalization {da}, RMSNormalization {db}"
            );
            assert_eq!(da, db, "{file} new {new} past {past}: dispatch counts");
            assert_eq!(va.len(), vb.len());
            for ((na, xa), (_, xb)) in va.iter().zip(&vb) {
                let worst = xa
                    .iter()
                    .zip(xb)
                    .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
                assert!(
                    worst <= 1e-6,
                    "{file} new {new} past {past} {na}: max |rms - sln| {worst}"
                );
            }
        }
    }
}

/// Inputs of a mobius-exported decoder (`input_ids`, `attention_mask` of `past + new`, the KV
/// pairs): tokens and random pasts.
fn mobius_inputs(s: &Session, new: usize, past: usize, seed: u64) -> Vec<(String, Value)> {
    let mut rng = Rng(seed);
    let total = new + past;
    let mut out = Vec::new();
    for i in &s.graph.inputs {
        let dims = i.dims.clone().unwrap_or_default();
        let shape: Vec<usize> = dims
            .iter()
            .map(|d| match d {
                gg_runtime::model::Dim::Fixed(v) => *v as usize,
                gg_runtime::model::Dim::Param(p) if p.contains('+') => total,
                gg_runtime::model::Dim::Param(p) if p.contains("past") => past,
                gg_runtime::model::Dim::Param(p) if p.contains("seq") => new,
                _ => 1,
            })
            .collect();
        let n: usize = shape.iter().product();
        let v = match i.name.as_str() {
            "input_ids" => HostTensor::from_i64(
                shape,
                &(0..n)
                    .map(|k| (k as i64 * 37 + 11) % 1000)
                    .collect::<Vec<_>>(),
            ),
            "attention_mask" => HostTensor::from_i64(shape, &vec![1; n]),
            // the standard-Attention profile's positions of the new tokens
            "position_ids" => HostTensor::from_i64(
                shape,
                &(0..n).map(|k| (past + k % new) as i64).collect::<Vec<_>>(),
            ),
            // inputs_embeds and the past caches, in the graph's float type (f16 in q4f16)
            _ => {
                let v: Vec<f64> = (0..n).map(|_| f64::from(rng.next())).collect();
                HostTensor::from_f64_as(i.dtype().unwrap_or(DType::F32), shape, &v)
            }
        };
        out.push((i.name.clone(), Value::Host(v)));
    }
    out
}

/// The mobius exporter's Gemma 4 graphs (GroupQueryAttention profile), int4 and fp32: its
/// `SkipSimplifiedLayerNormalization(residual, RMSNormalization(o_proj))` steps become the
/// gate/up GEMV's residual + norm prologue (as our own graphs' `Add` + norm), its scale-free
/// value norms spelled as `Mul`/`ReduceMean`/`Add`/`Sqrt`/`Div` join the query and key norms in
/// one dispatch, and the float per-layer input gate `Gelu(MatMul) * Gather(per_layer, i)` (with
/// the post-norm and residual add before it) is one GEMV; in fp32 every float projection groups
/// as the 4-bit ones do. Fused and unfused sessions give the same logits and caches for a prompt
/// and decode steps (short, and past the sliding window of 8).
#[test]
fn mobius_graph_norm_patterns_fuse() {
    mobius_graph_fuses(
        "mobius-tiny-gqa-int4",
        &[
            ("Fused[Norm+Add+Norm+2xMatMulNBits+Gelu+Mul] at ", 6),
            ("Fused[2xRMSNormalization+1xSpelledRMSNorm] at ", 4),
            ("Fused[Norm+Add+1xMatMul+Gelu+Gather+Mul] at ", 6),
            ("Fused[Mul+ReduceMean+Add+Sqrt+Div=RMSNorm] at ", 0),
            ("Fused[Gelu+Gather+Mul] at ", 0),
        ],
    );
}

#[test]
fn mobius_fp32_graph_float_projections_fuse() {
    mobius_graph_fuses(
        "mobius-tiny-gqa-fp32",
        &[
            ("Fused[Norm+Add+Mul+Norm+3xMatMul] at ", 3),
            ("Fused[Norm+3xMatMul] at ", 1),
            ("Fused[Norm+Add+Norm+2xMatMul+Gelu+Mul] at ", 6),
            ("Fused[2xRMSNormalization+1xSpelledRMSNorm] at ", 4),
            ("Fused[Norm+Add+1xMatMul+Gelu+Gather+Mul] at ", 6),
            ("Fused[Norm+Add+Mul+Norm+1xMatMul+Div+Tanh+Mul] at ", 1),
        ],
    );
}

/// The split package's decoder reads each layer's per-layer input as
/// `Squeeze(Slice(per_layer_inputs, [i], [i + 1], [2]), [2])`: the gate GEMV's epilogue reads it
/// as the gather it spells.
#[test]
fn mobius_split_decoder_sliced_per_layer_inputs_fuse() {
    mobius_graph_fuses(
        "mobius-tiny-gqa-int4-split/decoder",
        &[
            ("Fused[Norm+Add+1xMatMul+Gelu+Gather+Mul] at ", 6),
            ("Fused[2xRMSNormalization+1xSpelledRMSNorm] at ", 4),
        ],
    );
}

/// mobius' WebGPU split of the per-layer table (forced at the tiny size: one [V, D] table per
/// layer in the decoder, read at the token ids, times its scale, stacked by a `Concat`), f32 and
/// f16: the six lookups are one dispatch, and the rotary-table pairing does not take their
/// gathers.
#[test]
fn mobius_per_layer_tables_in_the_decoder_fuse() {
    for name in [
        "mobius-tiny-webgpu-int4-split-ple/decoder",
        "mobius-tiny-webgpu-int4f16-split-ple/decoder",
    ] {
        mobius_graph_fuses(
            name,
            &[
                ("Fused[6x(Gather+Mul+Unsqueeze)+Concat] at ", 1),
                ("Fused[2xGather] at ", 0),
            ],
        );
    }
}

/// `Concat(Unsqueeze(Mul(Gather(T_j, ids), s_j), 2) .., axis 2)` of `tables` tables [11, 4] of
/// `dtype` (the last without its `Mul`), ids [2, 3]; `expose` makes one lookup a graph output too.
fn layer_lookups(tables: usize, axis: i64, expose: bool, dtype: DType) -> Graph {
    let mut rng = Rng(5);
    let mut g = G::default();
    g.input("ids");
    g.inputs[0].elem_type = 7; // int64
    let axes = g.init("axes", DType::I64, vec![1], axis.to_le_bytes().to_vec());
    let mut stacked = Vec::new();
    let float = |g: &mut G, name: &str, shape: Vec<usize>, v: Vec<f64>| {
        let t = HostTensor::from_f64_as(dtype, shape.clone(), &v);
        g.init(name, dtype, shape, t.data)
    };
    for j in 0..tables {
        let t: Vec<f64> = (0..44).map(|_| f64::from(rng.next())).collect();
        let t = float(&mut g, &format!("t{j}"), vec![11, 4], t);
        let mut v = g.node("Gather", "", &[&t, "ids"], &format!("g{j}"), vec![]);
        if j + 1 < tables {
            // 1.5 + 0.3 j: not exact in f16 or f32, so the product rounds
            let s = float(&mut g, &format!("s{j}"), vec![], vec![1.5 + 0.3 * j as f64]);
            v = g.node("Mul", "", &[&v, &s], &format!("m{j}"), vec![]);
        }
        if expose && j == 1 {
            g.output(&v);
        }
        stacked.push(g.node("Unsqueeze", "", &[&v, &axes], &format!("u{j}"), vec![]));
    }
    let refs: Vec<&str> = stacked.iter().map(String::as_str).collect();
    g.node("Concat", "", &refs, "y", vec![attr_i("axis", axis)]);
    g.output("y");
    g.graph()
}

/// The per-layer lookups on a small graph: one dispatch with the adapter's bindings, one per two
/// tables when it allows only four storage buffers (ids and result besides), and equal to the
/// unfused nodes in each case (negative ids included); a lookup read outside, or a stacking axis
/// other than the one before the rows', runs the nodes.
#[test]
fn layer_lookups_fuse_and_split_by_bindings() {
    let ids = || {
        vec![(
            "ids".to_string(),
            Value::Host(HostTensor::from_i64(vec![2, 3], &[0, 3, 10, -1, 7, -11])),
        )]
    };
    let go = |gpu: &Rc<Gpu>, s: &Session| {
        let before = gpu.counters.snapshot().dispatches;
        let outs = pollster::block_on(s.run(ids())).expect("runs");
        let n = gpu.counters.snapshot().dispatches - before;
        (n, read_all(s, outs))
    };
    for (limit, axis, dtype, want_dispatches) in [
        (None, 2, DType::F32, 1),
        (Some(4), 2, DType::F32, 3),
        (None, -2, DType::F32, 1),
        (None, 2, DType::F16, 1),
        (Some(4), -2, DType::F16, 3),
    ] {
        let mut g = pollster::block_on(Gpu::new(None)).expect("a GPU adapter");
        if let Some(l) = limit {
            g.limits.max_storage_buffers_per_shader_stage = l;
        }
        let gpu = Rc::new(g);
        let fused = session(&gpu, layer_lookups(5, axis, false, dtype), true);
        let plain = session(&gpu, layer_lookups(5, axis, false, dtype), false);
        assert_eq!(
            fused.fused(),
            ["Fused[5x(Gather+Unsqueeze)+4xMul+Concat] at n0_Gather"],
            "{limit:?}"
        );
        let (df, a) = go(&gpu, &fused);
        let (dp, b) = go(&gpu, &plain);
        assert_eq!(
            df, want_dispatches,
            "{limit:?} axis {axis} {dtype:?}: unfused {dp}"
        );
        assert_eq!(a[0].1.len(), 2 * 3 * 5 * 4);
        assert_eq!(
            a, b,
            "{limit:?} axis {axis} {dtype:?}: fused = unfused exactly"
        );
    }
    let gpu = gpu();
    let s = session(&gpu, layer_lookups(5, 2, true, DType::F32), true);
    assert!(
        s.fused().iter().all(|k| !k.contains("Concat")),
        "{:?}",
        s.fused()
    );
    // stacked on axis 1 (before the ids' second axis): the group forms, its kernel declines and
    // the nodes run
    let fused = session(&gpu, layer_lookups(5, 1, false, DType::F32), true);
    let plain = session(&gpu, layer_lookups(5, 1, false, DType::F32), false);
    let (df, a) = go(&gpu, &fused);
    let (dp, b) = go(&gpu, &plain);
    assert_eq!(a, b);
    assert_eq!(a[0].1.len(), 2 * 5 * 3 * 4);
    assert_eq!(df, dp, "axis 1 runs the original nodes");
}

/// Float16 norms (ai.onnx `RMSNormalization` with an f16 scale, `SkipSimplifiedLayerNormalization`
/// with its sum output) on rows of `len`: y (and the sum) against the f32 computation of the same
/// f16 inputs rounded once to f16, and the dispatches of a run.
fn f16_norms(len: usize) -> (f32, u64) {
    let gpu = gpu();
    let mut rng = Rng(17);
    let mut f16s = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| half::f16::from_f32(2.0 * rng.next()).to_f32())
            .collect()
    };
    let (x, skip, gamma) = (f16s(6 * len), f16s(6 * len), f16s(len));
    let to16 = gg_runtime::exec::f16_bytes;
    let mut g = G::default();
    for name in ["x", "skip"] {
        g.input(name);
        g.inputs.last_mut().expect("input").elem_type = 10;
    }
    let gm = g.init("gamma", DType::F16, vec![len], to16(&gamma));
    g.node(
        "RMSNormalization",
        "",
        &["x", &gm],
        "rms",
        vec![attr_f("epsilon", 1e-6), attr_i("axis", -1)],
    );
    g.nodes.push(Node {
        name: "skipnorm".into(),
        op_type: "SkipSimplifiedLayerNormalization".into(),
        domain: "com.microsoft".into(),
        inputs: vec!["x".into(), "skip".into(), gm.clone()],
        outputs: vec!["sy".into(), String::new(), String::new(), "sum".into()],
        attributes: vec![attr_f("epsilon", 1e-6)],
    });
    for o in ["rms", "sy", "sum"] {
        g.output(o);
    }
    let mut graph = g.graph();
    graph.opsets.insert(String::new(), 23);
    let s = session(&gpu, graph, false);
    let shape = vec![2, 3, len];
    let feed =
        |v: &[f32]| Value::Host(HostTensor::new(DType::F16, shape.clone(), to16(v)).expect("f16"));
    let before = gpu.counters.snapshot().dispatches;
    let outs = pollster::block_on(s.run(vec![
        ("x".to_string(), feed(&x)),
        ("skip".to_string(), feed(&skip)),
    ]))
    .expect("runs");
    let dispatches = gpu.counters.snapshot().dispatches - before;
    let got = read_all(&s, outs);
    // the f32 computation, rounded to f16 once
    let norm = |v: &[f32]| -> Vec<f32> {
        v.chunks(len)
            .flat_map(|r| {
                let ms = r.iter().map(|a| a * a).sum::<f32>() / len as f32;
                let inv = 1.0 / (ms + 1e-6).sqrt();
                r.iter()
                    .zip(&gamma)
                    .map(move |(a, g)| half::f16::from_f32(a * inv * g).to_f32())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let sum: Vec<f32> = x.iter().zip(&skip).map(|(a, b)| a + b).collect();
    let want = [
        norm(&x),
        norm(&sum),
        sum.iter()
            .map(|&v| half::f16::from_f32(v).to_f32())
            .collect(),
    ];
    let mut worst = 0f32;
    for ((name, v), w) in got.iter().zip(&want) {
        assert_eq!(v.len(), w.len(), "{name}");
        for (a, b) in v.iter().zip(w) {
            worst = worst.max((a - b).abs() / b.abs().max(1.0));
        }
    }
    (worst, dispatches)
}

/// Float16 norms write their f16 results themselves on rows of even length (a word holds two
/// elements of one row): one dispatch per node instead of the f32 result and a cast for each
/// output; odd rows keep the cast. Both within two f16 roundings of the f32 computation.
#[test]
fn f16_norms_write_f16_directly_on_even_rows() {
    let (even, d_even) = f16_norms(64);
    let (odd, d_odd) = f16_norms(63);
    eprintln!(
        "f16 norms: rows of 64: {d_even} dispatches, max rel {even:.1e}; rows of 63: {d_odd}, {odd:.1e}"
    );
    assert_eq!(
        d_even, 2,
        "RMSNormalization and SkipSimplifiedLayerNormalization: one each"
    );
    assert_eq!(
        d_odd, 5,
        "the f32 results and a cast for each of the three outputs"
    );
    for worst in [even, odd] {
        assert!(worst <= 2.0 * 9.8e-4, "max relative difference {worst}");
    }
}

/// The standard-Attention profile (E2B-style, one KV head; E4B-style, two): each layer's query
/// and key rotations are one dispatch, the KV-shared layers' Attention reads the shared caches in
/// place instead of through `Transpose` + `Reshape`, the cos and sin `Gather`s go in pairs; the
/// `Attention` op appends its key and value caches in one dispatch.
#[test]
fn mobius_attention_profile_fuses() {
    // (package, layers with their own KV cache, layers)
    for (name, pairs, layers) in [
        ("mobius-tiny-attn-int4", 4, 6),
        ("mobius-tiny-e4b-attn-int4", 3, 5),
    ] {
        mobius_graph_fuses(
            name,
            &[
                ("Fused[2xRotaryEmbedding] at ", pairs),
                ("Fused[2x(Transpose+Reshape)+Attention] at ", 2),
                ("Fused[2xGather] at ", 2),
                ("Fused[Norm+Add+Norm+2xMatMulNBits+Gelu+Mul] at ", layers),
            ],
        );
    }
}

/// The fixture `name`'s graph (`model.onnx` in that folder) and a session of it, fused or not.
fn mobius_session(gpu: &Rc<Gpu>, name: &str, fuse: bool) -> Session {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/models")
        .join(name);
    let graph = Graph::decode(
        &std::fs::read(dir.join("model.onnx")).expect("model"),
        "mobius",
    )
    .expect("decodes");
    pollster::block_on(Session::from_graph_with(
        gpu.clone(),
        graph,
        &gg_runtime::source::DirSource::new(&dir),
        SessionOptions { fuse },
    ))
    .expect("loads")
}

/// mobius's float16 (`int4f16`) exports keep their norms' scales and the per-layer float
/// projections in float16, with no Casts around them: `RMSNormalization(x16, g16)`,
/// `SkipSimplifiedLayerNormalization` with an f16 scale, `MatMul(x16, W16)`, and the value norm
/// spelled out between `Cast(float)` and `Cast(float16)`. Each graph forms exactly the groups of
/// its float32 twin (the same export in int4), and its fused and unfused sessions agree.
#[test]
fn mobius_float16_graphs_fuse_as_their_float32_twins() {
    let gpu = gpu();
    let kinds = |s: &Session| {
        let mut k: Vec<String> = s
            .fused()
            .iter()
            .map(|f| f.split(" at ").next().unwrap_or(f).to_string())
            .collect();
        k.sort();
        k
    };
    for (half, single) in [
        (
            "mobius-tiny-webgpu-int4f16-split-ple/decoder",
            "mobius-tiny-webgpu-int4-split-ple/decoder",
        ),
        (
            "mobius-tiny-webgpu-int4f16-split/decoder",
            "mobius-tiny-webgpu-int4-split/decoder",
        ),
        (
            "mobius-tiny-webgpu-int4f16-split/embedding",
            "mobius-tiny-webgpu-int4-split/embedding",
        ),
        ("mobius-tiny-attn-int4f16", "mobius-tiny-attn-int4"),
    ] {
        let (h, f) = (
            mobius_session(&gpu, half, true),
            mobius_session(&gpu, single, true),
        );
        assert!(!kinds(&f).is_empty(), "{single}: no groups");
        assert_eq!(kinds(&h), kinds(&f), "{half} vs {single}");
    }
    mobius_graph_fuses(
        "mobius-tiny-webgpu-int4f16-split-ple/decoder",
        &[
            ("Fused[Norm+Add+Norm+2xMatMulNBits+Gelu+Mul] at ", 6),
            ("Fused[2xRMSNormalization+1xSpelledRMSNorm] at ", 4),
            ("Fused[Norm+Add+1xMatMul+Gelu+Gather+Mul] at ", 6),
            ("Fused[Norm+Add+Mul+Norm+3xMatMulNBits] at ", 3),
        ],
    );
}

/// The fixture `name`'s graph (`model.onnx` in that folder): its groups (kind prefix, count),
/// then fused = unfused.
fn mobius_graph_fuses(name: &str, want: &[(&str, usize)]) {
    let gpu = gpu();
    let (fused, plain) = (
        mobius_session(&gpu, name, true),
        mobius_session(&gpu, name, false),
    );
    let graph = &fused.graph;
    // Relative to the output's scale. A float16 graph's unfused nodes round each intermediate to
    // f16 (unit roundoff 4.9e-4) where the fused kernels keep f32 (the per-layer tables' q4f16
    // decoder: 2.5e-3 after a prompt of 5), so it gets the f16 bound.
    let f16 = graph
        .inputs
        .iter()
        .any(|i| i.dtype().ok() == Some(DType::F16));
    let tol = if f16 { 5e-3 } else { 1e-4 };
    let count = |kind: &str| fused.fused().iter().filter(|k| k.starts_with(kind)).count();
    // Six layers: each skip norm in its layer's gate/up group; the four non-shared layers'
    // query, key and value norms; each layer's per-layer input gate.
    for &(kind, n) in want {
        assert_eq!(count(kind), n, "{name}: {kind}: {:?}", fused.fused());
    }
    assert!(
        fused
            .graph
            .nodes
            .iter()
            .any(|n| n.op_type == "SkipSimplifiedLayerNormalization"),
        "the graph has the skip norms"
    );
    for (new, past) in [(5, 0), (1, 9), (1, 20)] {
        let run = |s: &Session| {
            let before = gpu.counters.snapshot().dispatches;
            let outs = pollster::block_on(s.run(mobius_inputs(s, new, past, 3))).expect("runs");
            let n = gpu.counters.snapshot().dispatches - before;
            let v: Vec<(String, Vec<f32>)> = outs
                .into_iter()
                .map(|(n, v)| (n, pollster::block_on(s.read(&v)).expect("reads").to_f32()))
                .collect();
            (n, v)
        };
        let (df, a) = run(&fused);
        let (dp, b) = run(&plain);
        eprintln!("{name} new {new} past {past}: dispatches fused {df}, unfused {dp}");
        assert!(df < dp, "new {new} past {past}: fused {df} vs unfused {dp}");
        let mut max_rel = 0f32;
        for ((na, va), (_, vb)) in a.iter().zip(&b) {
            let scale = vb.iter().fold(0f32, |m, v| m.max(v.abs())).max(1.0);
            let worst = va
                .iter()
                .zip(vb)
                .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
            assert!(
                worst <= tol * scale,
                "{name} new {new} past {past} {na}: max |fused - unfused| {worst} (scale {scale})"
            );
            max_rel = max_rel.max(worst / scale);
        }
        eprintln!("{name} new {new} past {past}: max |fused - unfused| / scale {max_rel:.1e}");
    }
}

/// `y = x / sqrt(mean(x², axis -1) + eps)` spelled out; `axis` the ReduceMean axis, `expose` an
/// intermediate made a graph output too.
fn spelled_norm(axis: i64, expose: Option<&str>) -> Graph {
    let mut g = G::default();
    g.input("x");
    let axes = g.init("axes", DType::I64, vec![1], axis.to_le_bytes().to_vec());
    let eps = g.f32s("eps", vec![], vec![1e-6]);
    g.node("Mul", "", &["x", "x"], "sq", vec![]);
    g.node(
        "ReduceMean",
        "",
        &["sq", &axes],
        "ms",
        vec![attr_i("keepdims", 1)],
    );
    g.node("Add", "", &[&eps, "ms"], "mse", vec![]);
    g.node("Sqrt", "", &["mse"], "rms", vec![]);
    g.node("Div", "", &["x", "rms"], "y", vec![]);
    g.output("y");
    if let Some(e) = expose {
        g.output(e);
    }
    g.graph()
}

#[test]
fn spelled_out_rms_norm_is_one_dispatch_and_guarded() {
    let gpu = gpu();
    for rows in [1, 5] {
        let x: Vec<f32> = {
            let mut rng = Rng(5);
            (0..rows * K).map(|_| 3.0 * rng.next()).collect()
        };
        let feeds = || {
            vec![(
                "x".to_string(),
                Value::Host(HostTensor::from_f32(vec![1, rows, K], &x)),
            )]
        };
        let (f, p) = (
            session(&gpu, spelled_norm(-1, None), true),
            session(&gpu, spelled_norm(-1, None), false),
        );
        assert_eq!(
            f.fused(),
            ["Fused[Mul+ReduceMean+Add+Sqrt+Div=RMSNorm] at n0_Mul"]
        );
        let before = gpu.counters.snapshot().dispatches;
        let a = read_all(&f, pollster::block_on(f.run(feeds())).expect("runs"));
        let mid = gpu.counters.snapshot().dispatches;
        let b = read_all(&p, pollster::block_on(p.run(feeds())).expect("runs"));
        let after = gpu.counters.snapshot().dispatches;
        assert_eq!(mid - before, 1, "fused dispatches");
        assert_eq!(after - mid, 5, "unfused dispatches");
        assert_close(&a, &b);
    }
    // Not the last axis, or an intermediate read outside: left alone.
    assert!(
        session(&gpu, spelled_norm(1, None), true)
            .fused()
            .is_empty()
    );
    assert!(
        session(&gpu, spelled_norm(-1, Some("rms")), true)
            .fused()
            .is_empty()
    );
}

/// `y = Gelu(tanh)(a) * Gather(data, idx, axis = 2)`; `idx` a scalar initializer, or (`input`)
/// a graph input; `a` and `data` of ONNX type `elem` (1 f32, 10 f16).
fn gelu_gather_graph(idx_input: bool, elem: i32) -> Graph {
    let mut g = G::default();
    g.input("a");
    g.input("data");
    for i in &mut g.inputs {
        i.elem_type = elem;
    }
    let idx = if idx_input {
        g.inputs.push(ValueInfo {
            name: "idx".into(),
            elem_type: 7,
            dims: None,
        });
        "idx".to_string()
    } else {
        g.init("idx", DType::I64, vec![], (-2i64).to_le_bytes().to_vec())
    };
    g.gelu("a", "ga");
    g.node("Gather", "", &["data", &idx], "sl", vec![attr_i("axis", 2)]);
    g.node("Mul", "", &["sl", "ga"], "y", vec![]);
    g.output("y");
    g.graph()
}

/// f32 and f16 (the f16 kernel rounds the Gelu result as the unfused f16 graph stores it: the
/// same values exactly).
#[test]
fn gelu_times_gathered_slice_is_one_dispatch_and_guarded() {
    let gpu = gpu();
    for (rows, dtype, elem) in [
        (1, DType::F32, 1),
        (4, DType::F32, 1),
        (1, DType::F16, 10),
        (4, DType::F16, 10),
    ] {
        let mut rng = Rng(17);
        let mut t = |shape: Vec<usize>| {
            let n = shape.iter().product();
            let v: Vec<f64> = (0..n).map(|_| 2.0 * f64::from(rng.next())).collect();
            Value::Host(HostTensor::from_f64_as(dtype, shape, &v))
        };
        let feeds = vec![
            ("a".to_string(), t(vec![1, rows, 32])),
            ("data".to_string(), t(vec![1, rows, 3, 32])),
        ];
        let (f, p) = (
            session(&gpu, gelu_gather_graph(false, elem), true),
            session(&gpu, gelu_gather_graph(false, elem), false),
        );
        assert_eq!(f.fused(), ["Fused[Gelu+Gather+Mul] at n0_Gelu"]);
        let before = gpu.counters.snapshot().dispatches;
        let a = read_all(&f, pollster::block_on(f.run(feeds.clone())).expect("runs"));
        let mid = gpu.counters.snapshot().dispatches;
        let b = read_all(&p, pollster::block_on(p.run(feeds)).expect("runs"));
        let after = gpu.counters.snapshot().dispatches;
        assert_eq!(mid - before, 1, "{dtype:?} fused dispatches");
        assert_eq!(after - mid, 3, "{dtype:?} unfused dispatches");
        if dtype == DType::F16 {
            assert_eq!(a, b, "f16: the same values");
        } else {
            assert_close(&a, &b);
        }
    }
    // An index known only at run time: left alone.
    assert!(
        session(&gpu, gelu_gather_graph(true, 1), true)
            .fused()
            .is_empty()
    );
}

/// What loading and running one fixture decoder builds: distinct WGSL pipelines compiled
/// (prompt of 5, then one decode step after 5), the fused groups by kind, and one decode token's
/// dispatches, submits and bytes (uploaded, read back; its outputs read).
#[derive(Debug, PartialEq, Eq)]
struct Built {
    pipelines: u64,
    dispatches: u64,
    submits: u64,
    uploaded: u64,
    read_back: u64,
    groups: Vec<(String, usize)>,
}

fn built(path: &str, mobius: bool) -> Built {
    // A fresh adapter: its pipeline cache starts empty, so `pipelines_compiled` counts the
    // distinct pipelines this graph builds.
    let gpu = gpu();
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/models")
        .join(path);
    let dir = file.parent().expect("folder").to_path_buf();
    let graph = Graph::decode(&std::fs::read(&file).expect("model"), path).expect("decodes");
    let s = pollster::block_on(Session::from_graph_with(
        gpu.clone(),
        graph,
        &gg_runtime::source::DirSource::new(&dir),
        SessionOptions { fuse: true },
    ))
    .expect("loads");
    let step = |new: usize, past: usize| {
        let feeds = if mobius {
            mobius_inputs(&s, new, past, 5)
        } else {
            decoder_inputs(&s, new, past, 5)
        };
        read_all(&s, pollster::block_on(s.run(feeds)).expect("runs"));
    };
    step(5, 0);
    let before = gpu.counters.snapshot();
    step(1, 5);
    let after = gpu.counters.snapshot();
    let mut groups = BTreeMap::<String, usize>::new();
    for k in s.fused() {
        let kind = k.split(" at ").next().expect("kind");
        *groups.entry(kind.to_string()).or_default() += 1;
    }
    Built {
        pipelines: after.pipelines_compiled,
        dispatches: after.dispatches - before.dispatches,
        submits: after.submits - before.submits,
        uploaded: after.bytes_uploaded - before.bytes_uploaded,
        read_back: after.bytes_read_back - before.bytes_read_back,
        groups: groups.into_iter().collect(),
    }
}

/// (fixture decoder, mobius inputs, pipelines, decode dispatches, submits, bytes uploaded, bytes
/// read back, fused groups by kind): measured on the software adapter before the fusion pass was
/// split into modules; a lost or changed fusion, an extra kernel variant or an extra dispatch per
/// token fails here.
#[allow(clippy::type_complexity)]
const BUILT: &[(&str, bool, u64, u64, u64, u64, u64, &[(&str, usize)])] = &[
    (
        "gemma4-tiny/onnx/decoder_model_merged_q4.onnx",
        false,
        44,
        59,
        10,
        7504,
        11776,
        &[
            ("Fused[1xMatMulNBits+Div+Tanh+Mul]", 1),
            ("Fused[1xMatMulNBits+Mul]", 1),
            ("Fused[1xMatMulNBits]", 18),
            ("Fused[1xSimplifiedLayerNormalization+Add+Mul]", 2),
            ("Fused[2x(Gather+Concat)]", 2),
            ("Fused[3xSimplifiedLayerNormalization]", 4),
            ("Fused[Norm+3xMatMulNBits]", 1),
            ("Fused[Norm+Add+1xMatMulNBits+Gelu+Gather+Mul]", 6),
            ("Fused[Norm+Add+Mul+Norm+1xMatMulNBits]", 2),
            ("Fused[Norm+Add+Mul+Norm+3xMatMulNBits]", 3),
            ("Fused[Norm+Add+Norm+2xMatMulNBits+Gelu+Mul]", 6),
            ("Fused[Norm+Rotary+SharedKVAttention]", 2),
        ],
    ),
    (
        "gemma4-tiny/onnx/decoder_model_merged_q4f16.onnx",
        false,
        47,
        60,
        10,
        4268,
        5888,
        &[
            ("Fused[1xMatMulNBits+Div+Tanh+Mul]", 1),
            ("Fused[1xMatMulNBits+Mul]", 1),
            ("Fused[1xMatMulNBits]", 18),
            ("Fused[1xSimplifiedLayerNormalization+Add+Mul]", 1),
            ("Fused[1xSimplifiedLayerNormalization+Cast+Add+Mul]", 1),
            ("Fused[1xSimplifiedLayerNormalization]", 1),
            ("Fused[2x(Gather+Concat)]", 2),
            ("Fused[3xSimplifiedLayerNormalization]", 4),
            ("Fused[Norm+3xMatMulNBits]", 1),
            ("Fused[Norm+Add+1xMatMulNBits+Gelu+Gather+Mul]", 6),
            ("Fused[Norm+Add+Mul+Norm+1xMatMulNBits]", 2),
            ("Fused[Norm+Add+Mul+Norm+3xMatMulNBits]", 3),
            ("Fused[Norm+Add+Norm+2xMatMulNBits+Gelu+Mul]", 6),
            ("Fused[Norm+Rotary+SharedKVAttention]", 2),
        ],
    ),
    (
        "gemma4-tiny-e4b/onnx/decoder_model_merged_q4.onnx",
        false,
        43,
        50,
        8,
        11344,
        16384,
        &[
            ("Fused[1xMatMulNBits+Div+Tanh+Mul]", 1),
            ("Fused[1xMatMulNBits+Mul]", 1),
            ("Fused[1xMatMulNBits]", 15),
            ("Fused[1xSimplifiedLayerNormalization+Add+Mul]", 2),
            ("Fused[2x(Gather+Concat)]", 2),
            ("Fused[3xSimplifiedLayerNormalization]", 3),
            ("Fused[Norm+3xMatMulNBits]", 1),
            ("Fused[Norm+Add+1xMatMulNBits+Gelu+Gather+Mul]", 5),
            ("Fused[Norm+Add+Mul+Norm+1xMatMulNBits]", 2),
            ("Fused[Norm+Add+Mul+Norm+3xMatMulNBits]", 2),
            ("Fused[Norm+Add+Norm+2xMatMulNBits+Gelu+Mul]", 5),
            ("Fused[Norm+Rotary+SharedKVAttention]", 2),
        ],
    ),
    (
        "gemma4-tiny-e4b/onnx/decoder_model_merged_q4f16.onnx",
        false,
        47,
        51,
        8,
        6188,
        8192,
        &[
            ("Fused[1xMatMulNBits+Div+Tanh+Mul]", 1),
            ("Fused[1xMatMulNBits+Mul]", 1),
            ("Fused[1xMatMulNBits]", 15),
            ("Fused[1xSimplifiedLayerNormalization+Add+Mul]", 1),
            ("Fused[1xSimplifiedLayerNormalization+Cast+Add+Mul]", 1),
            ("Fused[1xSimplifiedLayerNormalization]", 1),
            ("Fused[2x(Gather+Concat)]", 2),
            ("Fused[3xSimplifiedLayerNormalization]", 3),
            ("Fused[Norm+3xMatMulNBits]", 1),
            ("Fused[Norm+Add+1xMatMulNBits+Gelu+Gather+Mul]", 5),
            ("Fused[Norm+Add+Mul+Norm+1xMatMulNBits]", 2),
            ("Fused[Norm+Add+Mul+Norm+3xMatMulNBits]", 2),
            ("Fused[Norm+Add+Norm+2xMatMulNBits+Gelu+Mul]", 5),
            ("Fused[Norm+Rotary+SharedKVAttention]", 2),
        ],
    ),
    (
        "mobius-tiny-gqa-int4/model.onnx",
        true,
        40,
        59,
        10,
        6408,
        11776,
        &[
            ("Fused[1xMatMul+Mul]", 1),
            ("Fused[1xMatMulNBits]", 12),
            ("Fused[1xRMSNormalization+Add+Mul]", 1),
            ("Fused[2xRMSNormalization+1xSpelledRMSNorm]", 4),
            ("Fused[Norm+3xMatMulNBits]", 1),
            ("Fused[Norm+Add+1xMatMul+Gelu+Gather+Mul]", 6),
            ("Fused[Norm+Add+Mul+Norm+1xMatMulNBits+Div+Tanh+Mul]", 1),
            ("Fused[Norm+Add+Mul+Norm+1xMatMulNBits]", 2),
            ("Fused[Norm+Add+Mul+Norm+3xMatMulNBits]", 3),
            ("Fused[Norm+Add+Norm+2xMatMulNBits+Gelu+Mul]", 6),
        ],
    ),
    (
        "mobius-tiny-gqa-fp32/model.onnx",
        true,
        38,
        57,
        10,
        6408,
        11776,
        &[
            ("Fused[1xMatMul+Mul]", 1),
            ("Fused[1xRMSNormalization+Add+Mul]", 1),
            ("Fused[2xRMSNormalization+1xSpelledRMSNorm]", 4),
            ("Fused[Gather+Mul]", 2),
            ("Fused[Norm+3xMatMul]", 1),
            ("Fused[Norm+Add+1xMatMul+Gelu+Gather+Mul]", 6),
            ("Fused[Norm+Add+Mul+Norm+1xMatMul+Div+Tanh+Mul]", 1),
            ("Fused[Norm+Add+Mul+Norm+1xMatMul]", 2),
            ("Fused[Norm+Add+Mul+Norm+3xMatMul]", 3),
            ("Fused[Norm+Add+Norm+2xMatMul+Gelu+Mul]", 6),
        ],
    ),
    (
        "mobius-tiny-e4b-gqa-int4/model.onnx",
        true,
        39,
        50,
        8,
        10248,
        16384,
        &[
            ("Fused[1xMatMul+Mul]", 1),
            ("Fused[1xMatMulNBits]", 10),
            ("Fused[1xRMSNormalization+Add+Mul]", 1),
            ("Fused[2xRMSNormalization+1xSpelledRMSNorm]", 3),
            ("Fused[Norm+3xMatMulNBits]", 1),
            ("Fused[Norm+Add+1xMatMul+Gelu+Gather+Mul]", 5),
            ("Fused[Norm+Add+Mul+Norm+1xMatMulNBits+Div+Tanh+Mul]", 1),
            ("Fused[Norm+Add+Mul+Norm+1xMatMulNBits]", 2),
            ("Fused[Norm+Add+Mul+Norm+3xMatMulNBits]", 2),
            ("Fused[Norm+Add+Norm+2xMatMulNBits+Gelu+Mul]", 5),
        ],
    ),
    (
        "mobius-tiny-gqa-int4-split/decoder/model.onnx",
        true,
        37,
        53,
        10,
        7428,
        11776,
        &[
            ("Fused[1xMatMulNBits]", 12),
            ("Fused[2xRMSNormalization+1xSpelledRMSNorm]", 4),
            ("Fused[Norm+3xMatMulNBits]", 1),
            ("Fused[Norm+Add+1xMatMul+Gelu+Gather+Mul]", 6),
            ("Fused[Norm+Add+Mul+Norm+1xMatMulNBits+Div+Tanh+Mul]", 1),
            ("Fused[Norm+Add+Mul+Norm+1xMatMulNBits]", 2),
            ("Fused[Norm+Add+Mul+Norm+3xMatMulNBits]", 3),
            ("Fused[Norm+Add+Norm+2xMatMulNBits+Gelu+Mul]", 6),
        ],
    ),
    (
        "mobius-tiny-attn-int4/model.onnx",
        true,
        38,
        67,
        10,
        6456,
        11776,
        &[
            ("Fused[1xMatMul+Mul]", 1),
            ("Fused[1xMatMulNBits]", 12),
            ("Fused[1xRMSNormalization+Add+Mul]", 1),
            ("Fused[2x(Transpose+Reshape)+Attention]", 2),
            ("Fused[2xGather]", 2),
            ("Fused[2xRMSNormalization+1xSpelledRMSNorm]", 4),
            ("Fused[2xRotaryEmbedding]", 4),
            ("Fused[Norm+3xMatMulNBits]", 1),
            ("Fused[Norm+Add+1xMatMul+Gelu+Gather+Mul]", 6),
            ("Fused[Norm+Add+Mul+Norm+1xMatMulNBits+Div+Tanh+Mul]", 1),
            ("Fused[Norm+Add+Mul+Norm+1xMatMulNBits]", 2),
            ("Fused[Norm+Add+Mul+Norm+3xMatMulNBits]", 3),
            ("Fused[Norm+Add+Norm+2xMatMulNBits+Gelu+Mul]", 6),
        ],
    ),
    (
        "mobius-tiny-e4b-attn-int4/model.onnx",
        true,
        37,
        57,
        8,
        10296,
        16384,
        &[
            ("Fused[1xMatMul+Mul]", 1),
            ("Fused[1xMatMulNBits]", 10),
            ("Fused[1xRMSNormalization+Add+Mul]", 1),
            ("Fused[2x(Transpose+Reshape)+Attention]", 2),
            ("Fused[2xGather]", 2),
            ("Fused[2xRMSNormalization+1xSpelledRMSNorm]", 3),
            ("Fused[2xRotaryEmbedding]", 3),
            ("Fused[Norm+3xMatMulNBits]", 1),
            ("Fused[Norm+Add+1xMatMul+Gelu+Gather+Mul]", 5),
            ("Fused[Norm+Add+Mul+Norm+1xMatMulNBits+Div+Tanh+Mul]", 1),
            ("Fused[Norm+Add+Mul+Norm+1xMatMulNBits]", 2),
            ("Fused[Norm+Add+Mul+Norm+3xMatMulNBits]", 2),
            ("Fused[Norm+Add+Norm+2xMatMulNBits+Gelu+Mul]", 5),
        ],
    ),
    (
        "mobius-tiny-attn-fp32-split/decoder/model.onnx",
        true,
        33,
        61,
        10,
        7476,
        11776,
        &[
            ("Fused[2x(Transpose+Reshape)+Attention]", 2),
            ("Fused[2xGather]", 2),
            ("Fused[2xRMSNormalization+1xSpelledRMSNorm]", 4),
            ("Fused[2xRotaryEmbedding]", 4),
            ("Fused[Norm+3xMatMul]", 1),
            ("Fused[Norm+Add+1xMatMul+Gelu+Gather+Mul]", 6),
            ("Fused[Norm+Add+Mul+Norm+1xMatMul+Div+Tanh+Mul]", 1),
            ("Fused[Norm+Add+Mul+Norm+1xMatMul]", 2),
            ("Fused[Norm+Add+Mul+Norm+3xMatMul]", 3),
            ("Fused[Norm+Add+Norm+2xMatMul+Gelu+Mul]", 6),
        ],
    ),
];

#[test]
fn the_same_pipelines_and_groups_per_fixture() {
    let mut wrong = Vec::new();
    for &(path, mobius, pipelines, dispatches, submits, uploaded, read_back, groups) in BUILT {
        let want = Built {
            pipelines,
            dispatches,
            submits,
            uploaded,
            read_back,
            groups: groups.iter().map(|&(k, n)| (k.to_string(), n)).collect(),
        };
        let got = built(path, mobius);
        eprintln!("{path}: {got:?}");
        if got != want {
            wrong.push(format!("{path}: want {want:?}\n got {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

fn attr_ints(name: &str, v: &[i64]) -> proto::AttributeProto {
    proto::AttributeProto {
        name: Some(name.into()),
        ints: v.to_vec(),
        r#type: Some(proto::attribute_proto::AttributeType::Ints as i32),
        ..Default::default()
    }
}

/// A variant of the spelled-out attention graph (see [`spelled_attention`]).
#[derive(Clone, Copy, PartialEq)]
enum Attn {
    /// The vision encoder's form: q [B, S, H, D] transposed in the graph.
    Vision,
    /// The query given head-major, [B, H, S, D] (no Transpose of it).
    HeadMajorQuery,
    /// A scale `Mul` between the scores and the mask (not matched).
    Scaled,
    /// Softmax over axis 2 (not matched).
    Axis2,
    /// The probabilities also a graph output (not matched).
    ExposedProbs,
}

/// `y = Transpose(Softmax(MatMul(Transpose(q, 0213), Transpose(k, 0132)) + mask, -1) @ v, 0213)`
/// (the mobius vision encoder's attention), or a variant.
fn spelled_attention(v: Attn) -> Graph {
    let mut g = G::default();
    for i in ["q", "k", "v", "mask"] {
        g.input(i);
    }
    let qt = if v == Attn::HeadMajorQuery {
        "q".to_string()
    } else {
        g.node(
            "Transpose",
            "",
            &["q"],
            "qt",
            vec![attr_ints("perm", &[0, 2, 1, 3])],
        )
    };
    g.node(
        "Transpose",
        "",
        &["k"],
        "kt",
        vec![attr_ints("perm", &[0, 1, 3, 2])],
    );
    let mut sc = g.node("MatMul", "", &[&qt, "kt"], "sc", vec![]);
    if v == Attn::Scaled {
        let c = g.f32s("c", vec![], vec![0.5]);
        sc = g.node("Mul", "", &[&sc, &c], "scs", vec![]);
    }
    g.node("Add", "", &["mask", &sc], "sm", vec![]);
    let axis = if v == Attn::Axis2 { 2 } else { -1 };
    g.node("Softmax", "", &["sm"], "p", vec![attr_i("axis", axis)]);
    g.node("MatMul", "", &["p", "v"], "o", vec![]);
    g.node(
        "Transpose",
        "",
        &["o"],
        "y",
        vec![attr_ints("perm", &[0, 2, 1, 3])],
    );
    g.output("y");
    if v == Attn::ExposedProbs {
        g.output("p");
    }
    g.graph()
}

#[test]
fn spelled_attention_is_one_flash_attention_and_guarded() {
    let (b, s, h, t, d) = (2, 5, 3, 7, 8);
    let feeds = |v: Attn, mask: &[usize]| {
        let mut rng = Rng(23);
        let mut rand = |shape: Vec<usize>, scale: f32| {
            let n = shape.iter().product();
            let x: Vec<f32> = (0..n).map(|_| scale * rng.next()).collect();
            Value::Host(HostTensor::from_f32(shape, &x))
        };
        let q = if v == Attn::HeadMajorQuery {
            rand(vec![b, h, s, d], 1.5)
        } else {
            rand(vec![b, s, h, d], 1.5)
        };
        // Additive padding: some keys far below the others, as the encoder's mask does.
        let mut m = rand(mask.to_vec(), 1.0);
        if let Value::Host(hm) = &m {
            let f: Vec<f32> = hm
                .to_f32()
                .iter()
                .map(|&x| if x > 0.6 { -3.0e38 } else { x })
                .collect();
            m = Value::Host(HostTensor::from_f32(mask.to_vec(), &f));
        }
        vec![
            ("q".to_string(), q),
            ("k".to_string(), rand(vec![b, h, t, d], 1.5)),
            ("v".to_string(), rand(vec![b, h, t, d], 1.0)),
            ("mask".to_string(), m),
        ]
    };
    for gpu in [gpu(), gpu_as_hardware()] {
        let software = gpu.tuning.software;
        for (v, kind) in [
            (
                Attn::Vision,
                "Fused[3xTranspose+2xMatMul+Add+Softmax=Attention]",
            ),
            (
                Attn::HeadMajorQuery,
                "Fused[2xTranspose+2xMatMul+Add+Softmax=Attention]",
            ),
        ] {
            let f = session(&gpu, spelled_attention(v), true);
            let p = session(&gpu, spelled_attention(v), false);
            assert_eq!(f.fused().len(), 1);
            assert!(f.fused()[0].starts_with(kind), "{:?}", f.fused());
            // Key padding [B, 1, 1, T] and a full [B, 1, S, T] mask run the attention kernel; a
            // mask broadcast along the keys ([B, H, S, 1]) runs the original nodes.
            for (mask, fast) in [
                (vec![b, 1, 1, t], true),
                (vec![b, 1, s, t], true),
                (vec![1, t], true),
                (vec![b, h, s, 1], false),
            ] {
                let before = gpu.counters.snapshot().dispatches;
                let a = read_all(
                    &f,
                    pollster::block_on(f.run(feeds(v, &mask))).expect("runs"),
                );
                let mid = gpu.counters.snapshot().dispatches;
                let r = read_all(
                    &p,
                    pollster::block_on(p.run(feeds(v, &mask))).expect("runs"),
                );
                let after = gpu.counters.snapshot().dispatches;
                assert_close(&a, &r);
                let (fused, unfused) = (mid - before, after - mid);
                if fast {
                    // One flash attention; on software adapters its three register-blocked passes.
                    assert_eq!(fused, if software { 3 } else { 1 }, "{mask:?}");
                } else {
                    assert_eq!(fused, unfused, "{mask:?}: the original nodes");
                }
            }
        }
        for v in [Attn::Scaled, Attn::Axis2, Attn::ExposedProbs] {
            assert!(session(&gpu, spelled_attention(v), true).fused().is_empty());
        }
    }
}

/// The vision encoder's 2-D rotary of x [B, S, H, 16]: each half of the head rotated by halves
/// with its own tables, `Concat(rot(x[..8], c0, s0), rot(x[8..], c1, s1))`; `split` where the
/// second part starts (8: the pattern), `expose` an intermediate made a graph output too.
fn rotary_2d(split: i64, expose: Option<&str>) -> Graph {
    let mut g = G::default();
    for i in ["x", "c0", "s0", "c1", "s1"] {
        g.input(i);
    }
    let i64s =
        |g: &mut G, name: &str, v: i64| g.init(name, DType::I64, vec![1], v.to_le_bytes().to_vec());
    let ax = i64s(&mut g, "ax", 3);
    for (v, name) in [(0, "i0"), (4, "i4"), (split, "isplit"), (16, "i16")] {
        i64s(&mut g, name, v);
    }
    let i8n = i64s(&mut g, "i8", 8);
    let slice = |g: &mut G, x: &str, a: &str, b: &str, out: &str| {
        g.node("Slice", "", &[x, a, b, &ax], out, vec![])
    };
    let mut parts = Vec::new();
    for (p, (lo, hi, c, s)) in [("isplit", "i16", "c1", "s1"), ("i0", "isplit", "c0", "s0")]
        .into_iter()
        .rev()
        .enumerate()
    {
        let part = slice(&mut g, "x", lo, hi, &format!("part{p}"));
        let a = slice(&mut g, &part, "i0", "i4", &format!("lo{p}"));
        let b = slice(&mut g, &part, "i4", &i8n, &format!("hi{p}"));
        let n = g.node("Neg", "", &[&b], &format!("neg{p}"), vec![]);
        let cat = g.node(
            "Concat",
            "",
            &[&n, &a],
            &format!("cat{p}"),
            vec![attr_i("axis", 3)],
        );
        let mc = g.node("Mul", "", &[&part, c], &format!("mc{p}"), vec![]);
        let ms = g.node("Mul", "", &[&cat, s], &format!("ms{p}"), vec![]);
        parts.push(g.node("Add", "", &[&mc, &ms], &format!("rot{p}"), vec![]));
    }
    g.node(
        "Concat",
        "",
        &[&parts[0], &parts[1]],
        "y",
        vec![attr_i("axis", -1)],
    );
    g.output("y");
    if let Some(e) = expose {
        g.output(e);
    }
    g.graph()
}

#[test]
fn rotary_2d_is_one_dispatch_and_guarded() {
    let gpu = gpu();
    let (b, s, h) = (2, 5, 3);
    let feeds = |table: &[usize]| {
        let mut rng = Rng(31);
        let mut rand = |shape: Vec<usize>| {
            let n = shape.iter().product();
            let x: Vec<f32> = (0..n).map(|_| 2.0 * rng.next()).collect();
            Value::Host(HostTensor::from_f32(shape, &x))
        };
        let mut f = vec![("x".to_string(), rand(vec![b, s, h, 16]))];
        for t in ["c0", "s0", "c1", "s1"] {
            f.push((t.to_string(), rand(table.to_vec())));
        }
        f
    };
    let (f, p) = (
        session(&gpu, rotary_2d(8, None), true),
        session(&gpu, rotary_2d(8, None), false),
    );
    assert_eq!(f.fused().len(), 1, "{:?}", f.fused());
    assert!(
        f.fused()[0].ends_with("=Rotary2D] at n0_Slice"),
        "{:?}",
        f.fused()
    );
    // Per-token tables ([B, S, 1, 8], or [S, 1, 8] shared by the batch) run the kernel; tables
    // that differ per head run the original nodes.
    for (table, fast) in [
        (vec![b, s, 1, 8], true),
        (vec![s, 1, 8], true),
        (vec![b, s, h, 8], false),
    ] {
        let before = gpu.counters.snapshot().dispatches;
        let x = read_all(&f, pollster::block_on(f.run(feeds(&table))).expect("runs"));
        let mid = gpu.counters.snapshot().dispatches;
        let y = read_all(&p, pollster::block_on(p.run(feeds(&table))).expect("runs"));
        let after = gpu.counters.snapshot().dispatches;
        assert_close(&x, &y);
        if fast {
            assert_eq!(mid - before, 1, "{table:?}");
        } else {
            assert_eq!(mid - before, after - mid, "{table:?}: the original nodes");
        }
    }
    // Parts that do not split the head in halves, or an intermediate read outside: left alone.
    assert!(session(&gpu, rotary_2d(6, None), true).fused().is_empty());
    assert!(
        session(&gpu, rotary_2d(8, Some("neg1")), true)
            .fused()
            .is_empty()
    );
}

/// A host index past a GPU table is an error naming it, fused (the rotary tables' one dispatch)
/// or not (Gather's kernel), where the kernels would read zeros: positions beyond a rotary
/// table, token ids beyond an embedding. Negative indices count from the end, as ONNX says.
#[test]
fn an_index_past_a_table_is_an_error() {
    const ROWS: usize = 4096;
    let gpu = gpu();
    let mut g = G::default();
    g.inputs.push(ValueInfo {
        name: "pos".into(),
        elem_type: DType::I64.to_onnx(),
        dims: None,
    });
    let cos: Vec<f32> = (0..ROWS * 8).map(|i| i as f32).collect();
    let sin: Vec<f32> = (0..ROWS * 8).map(|i| -(i as f32)).collect();
    let cos = g.f32s("cos_table", vec![ROWS, 8], cos);
    let sin = g.f32s("sin_table", vec![ROWS, 8], sin);
    g.node("Gather", "", &[&cos, "pos"], "c", vec![]);
    g.node("Gather", "", &[&sin, "pos"], "s", vec![]);
    for out in ["c", "s"] {
        g.outputs.push(ValueInfo {
            name: out.into(),
            elem_type: DType::F32.to_onnx(),
            dims: None,
        });
    }
    let graph = g.graph();
    let pos = |v: &[i64]| {
        vec![(
            "pos".to_string(),
            Value::Host(HostTensor::from_i64(vec![1, v.len()], v)),
        )]
    };
    for fuse in [true, false] {
        let s = session(&gpu, graph.clone(), fuse);
        let outs = pollster::block_on(s.run(pos(&[0, 5, ROWS as i64 - 1, -1]))).expect("runs");
        let got = read_all(&s, outs);
        let c = &got.iter().find(|(n, _)| n == "c").expect("c").1;
        let last = (ROWS - 1) as f32 * 8.0;
        assert_eq!(c[8], 40.0, "fuse {fuse}: row 5");
        assert_eq!(c[16], last, "fuse {fuse}: the last row");
        assert_eq!(c[24], last, "fuse {fuse}: index -1 is the last row");
        for bad in [ROWS as i64, -(ROWS as i64) - 1] {
            let e = pollster::block_on(s.run(pos(&[0, bad, 1])))
                .err()
                .unwrap_or_else(|| panic!("fuse {fuse}: index {bad} ran"))
                .to_string();
            assert!(
                e.contains(&format!("{bad} out of range for a dimension of {ROWS}")),
                "fuse {fuse}: {e}"
            );
        }
    }
}
