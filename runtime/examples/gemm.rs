//! Times one MatMulNBits (4-bit, block 32, f16 or f32 activations) of a chosen shape: the kernel
//! that decides prefill speed. A tuning aid, not a test; run it on the adapter you tune for, e.g.
//! SwiftShader (what headless Chromium uses without a GPU):
//!
//! ```text
//! VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json WGPU_BACKEND=vulkan \
//!   cargo run --release -p gg-runtime --example gemm -- 128 1536 6144 [runs] [f32]
//! ```
//!
//! Prints the adapter, the shape and, per run, seconds and GMAC/s (multiply-adds of M x K x N).

use gg_runtime::model::{Graph, InitData, Initializer, Node, ValueInfo};
use gg_runtime::proto;
use gg_runtime::source::MemorySource;
use gg_runtime::{DType, Gpu, HostTensor, Session, SessionOptions, Value};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

const BLOCK: usize = 32;

fn attr_i(name: &str, v: i64) -> proto::AttributeProto {
    proto::AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        r#type: Some(proto::attribute_proto::AttributeType::Int as i32),
        ..Default::default()
    }
}

fn graph(k: usize, n: usize, elem: i32) -> Graph {
    let nb = k.div_ceil(BLOCK);
    let mut seed = 7u64;
    let mut byte = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as u8
    };
    let q: Vec<u8> = (0..n * nb * BLOCK / 2).map(|_| byte()).collect();
    let s: Vec<u8> = (0..n * nb)
        .flat_map(|i| (0.01 + 0.001 * (i % 7) as f32).to_le_bytes())
        .collect();
    let init = |name: &str, dtype, shape, data| Initializer {
        name: name.into(),
        dtype,
        shape,
        data: InitData::Inline(data),
    };
    let vi = |name: &str| ValueInfo {
        name: name.into(),
        elem_type: elem,
        dims: None,
    };
    Graph {
        inputs: vec![vi("x")],
        outputs: vec![vi("y")],
        initializers: vec![
            init("q", DType::U8, vec![n, nb, BLOCK / 2], q),
            init("s", DType::F32, vec![n, nb], s),
        ],
        nodes: vec![Node {
            name: "mnb".into(),
            op_type: "MatMulNBits".into(),
            domain: "com.microsoft".into(),
            inputs: vec!["x".into(), "q".into(), "s".into()],
            outputs: vec!["y".into()],
            attributes: vec![
                attr_i("K", k as i64),
                attr_i("N", n as i64),
                attr_i("bits", 4),
                attr_i("block_size", BLOCK as i64),
            ],
        }],
        opsets: BTreeMap::from([("".to_string(), 21), ("com.microsoft".to_string(), 1)]),
        inlined: Vec::new(),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: usize| -> usize {
        args.get(i)
            .map(|a| a.parse().unwrap_or_else(|_| panic!("not a number: {a}")))
            .unwrap_or(d)
    };
    let (m, k, n, runs) = (num(0, 128), num(1, 1536), num(2, 6144), num(3, 3));
    let f32_act = args.get(4).is_some_and(|a| a == "f32");
    let gpu = Rc::new(pollster::block_on(Gpu::new(None)).expect("a GPU adapter"));
    println!("adapter: {}", gpu.adapter);
    let elem = if f32_act { 1 } else { 10 };
    let s = pollster::block_on(Session::from_graph_with(
        gpu.clone(),
        graph(k, n, elem),
        &MemorySource::new(),
        SessionOptions { fuse: true },
    ))
    .expect("loads");
    let xs: Vec<f32> = (0..m * k)
        .map(|i| ((i * 37) % 101) as f32 / 101.0 - 0.5)
        .collect();
    let x = HostTensor::from_f32(vec![1, m, k], &xs);
    let x = if f32_act {
        x
    } else {
        let h: Vec<u8> = xs
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect();
        HostTensor::new(DType::F16, vec![1, m, k], h).expect("f16 input")
    };
    println!("M={m} K={k} N={n} {}", if f32_act { "f32" } else { "f16" });
    for r in 0..=runs {
        let t0 = Instant::now();
        let out =
            pollster::block_on(s.run(vec![("x".into(), Value::Host(x.clone()))])).expect("runs");
        let y = pollster::block_on(s.read(&out[0].1)).expect("reads");
        let dt = t0.elapsed().as_secs_f64();
        let y = y.to_f32();
        let sum: f64 = y.iter().map(|v| f64::from(*v)).sum();
        let gmac = (m * k * n) as f64 / dt / 1e9;
        let label = if r == 0 { "warm-up" } else { "run" };
        println!("{label}: {dt:.3} s, {gmac:.3} GMAC/s (checksum {sum:.4})");
    }
}
