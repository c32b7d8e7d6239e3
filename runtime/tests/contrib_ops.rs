//! com.microsoft ops (MatMulNBits, GatherBlockQuantized, SimplifiedLayerNormalization,
//! SkipSimplifiedLayerNormalization, GroupQueryAttention (also with zero new K/V tokens:
//! `gqa_shared_*`), RotaryEmbedding, MultiHeadAttention), Gelu, ai.onnx RMSNormalization, the
//! variadic Max / Min / Mean beyond the node suite (more inputs than one dispatch, NaNs), OneHot
//! (float indices, a depth computed at run time), a representative case per standard family and a
//! model with model-local functions against ONNX Runtime CPU references in tests/fixtures/ops
//! (regenerate with `.venv/bin/python tools/onnx/gen_contrib_refs.py`). Tolerances per case in
//! case.json: f32 rtol=atol=1e-4, f16 rtol=atol=5e-3 (the MultiHeadAttention cases `mha_*`
//! included: past 0 and > 0, bias, key_padding_mask 2-D/3-D, attention_bias, unidirectional,
//! odd head sizes, more than one 64-key softmax chunk, f32 and f16); infinite expected values
//! must be met exactly.

mod common;

use gg_runtime::Gpu;
use gg_runtime::model::Graph;
use std::path::Path;
use std::rc::Rc;

#[test]
fn contrib_ops_match_onnx_runtime() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/ops");
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/ops exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 30,
        "expected the committed reference cases in {}",
        dir.display()
    );
    let gpu =
        Rc::new(pollster::block_on(Gpu::new(None)).expect("a GPU adapter (lavapipe natively)"));
    // MatMulNBits picks its prefill GEMM, and GroupQueryAttention its prompt attention, by
    // adapter kind (register-blocked kernels on software adapters, workgroup-tiled or flash ones
    // on GPUs): their cases run with both.
    let hardware = Rc::new(common::as_hardware(
        pollster::block_on(Gpu::new(None)).expect("a GPU adapter (lavapipe natively)"),
    ));
    // The normalisations' and attentions' workgroup reductions use subgroup operations where
    // the device has them: every case runs without them too.
    let plain = Rc::new(common::open_without_subgroups());
    println!("adapter: {}, subgroups: {}", gpu.adapter, gpu.subgroups);
    let mut failures = Vec::new();
    let runs = cases.iter().flat_map(|case| {
        let by_kind = case
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("matmulnbits") || n.starts_with("gqa"));
        let mut v = vec![(case, &gpu, "")];
        if by_kind {
            v.push((case, &hardware, " [GPU kernels]"));
        }
        if gpu.subgroups {
            v.push((case, &plain, " [no subgroups]"));
        }
        v
    });
    let mut ran = 0;
    for (case, gpu, kind) in runs {
        ran += 1;
        let name = case
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string()
            + kind;
        let meta: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(case.join("case.json")).expect("case.json"),
        )
        .expect("valid case.json");
        let rtol = meta["rtol"].as_f64().expect("rtol");
        let atol = meta["atol"].as_f64().expect("atol");
        let graph = Graph::decode(
            &std::fs::read(case.join("model.onnx")).expect("model.onnx"),
            &name,
        )
        .expect("decodes");
        match common::run_case_diffs(gpu, case, graph, rtol, atol) {
            Ok(diffs) => println!(
                "ok   {name} (rtol {rtol}, atol {atol}; max |diff| {})",
                diffs
                    .iter()
                    .map(|(o, d)| format!("{o} {d:.2e}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(e) => {
                println!("FAIL {name}: {e}");
                failures.push(format!("{name}: {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from ONNX Runtime:\n{}",
        failures.len(),
        ran,
        failures.join("\n")
    );
}

/// Every MultiHeadAttention reference case is there (the loop above runs them) and the forms we
/// do not implement are refused when the model is loaded, with the reason.
#[test]
fn multi_head_attention_cases_and_unsupported_forms() {
    use gg_runtime::ops::Registry;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/ops");
    let n = std::fs::read_dir(&dir)
        .expect("tests/fixtures/ops exists")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("mha_"))
        .count();
    assert!(n >= 15, "expected the MultiHeadAttention cases, found {n}");
    let base = Graph::decode(
        &std::fs::read(dir.join("mha_prompt_bias/model.onnx")).expect("model.onnx"),
        "mha",
    )
    .expect("decodes");
    let registry = Registry::default();
    assert!(registry.check(&base).is_empty());
    let refused = |edit: &dyn Fn(&mut Graph), why: &str| {
        let mut g = base.clone();
        edit(&mut g);
        let bad = registry.check(&g);
        assert_eq!(bad.len(), 1, "{why}: expected a refusal");
        assert!(
            bad[0].reason.contains(why),
            "reason {:?} should mention {why:?}",
            bad[0].reason
        );
    };
    refused(
        &|g| {
            g.nodes[0].inputs[1].clear();
            g.nodes[0].inputs[2].clear();
        },
        "packed QKV",
    );
    refused(
        &|g| {
            g.nodes[0].inputs.resize(10, String::new());
            g.nodes[0].inputs[9] = "beams".into();
        },
        "cache_indirection",
    );
    refused(&|g| g.nodes[0].outputs.push("qk".into()), "qk output");
}

/// The quantised cases with the packed weight turned into an initializer and split by rows
/// across several buffers, as happens for tensors above the adapter's binding limit (LM head,
/// embedding tables).
#[test]
fn split_weights_match_onnx_runtime() {
    use gg_runtime::model::{InitData, Initializer, decode_tensor};
    use gg_runtime::source::MemorySource;
    use gg_runtime::{Session, Value};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/ops");
    let mut n = 0;
    let adapters = [false, true].map(|hardware| {
        let mut gpu =
            pollster::block_on(Gpu::new(None)).expect("a GPU adapter (lavapipe natively)");
        gpu.max_weight_part = 160;
        Rc::new(if hardware {
            common::as_hardware(gpu)
        } else {
            gpu
        })
    });
    let entries: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/ops exists")
        .flatten()
        .collect();
    for (e, gpu) in adapters
        .iter()
        .flat_map(|g| entries.iter().map(move |e| (e, g)))
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let weight = if name.starts_with("matmulnbits") {
            1
        } else if name.starts_with("gatherblockquantized") {
            0
        } else {
            continue;
        };
        let case = e.path();
        let meta: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(case.join("case.json")).expect("case.json"),
        )
        .expect("valid");
        let (rtol, atol) = (
            meta["rtol"].as_f64().expect("rtol"),
            meta["atol"].as_f64().expect("atol"),
        );
        let mut graph = Graph::decode(
            &std::fs::read(case.join("model.onnx")).expect("model.onnx"),
            &name,
        )
        .expect("decodes");
        let read = |f: String| {
            decode_tensor(
                &std::fs::read(case.join("test_data_set_0").join(&f)).expect("pb"),
                &f,
            )
            .expect("tensor")
        };
        let inputs: Vec<_> = (0..graph.inputs.len())
            .map(|j| read(format!("input_{j}.pb")))
            .collect();
        let w = graph.inputs.remove(weight);
        let wt = &inputs[weight];
        graph.initializers.push(Initializer {
            name: w.name.clone(),
            dtype: wt.dtype,
            shape: wt.shape.clone(),
            data: InitData::Inline(wt.data.clone()),
        });
        let session = pollster::block_on(Session::from_graph(
            gpu.clone(),
            graph.clone(),
            &MemorySource::new(),
        ))
        .expect("loads");
        assert_eq!(
            session.split_weights(),
            1,
            "{name}: the weight must be split"
        );
        let feeds: Vec<(String, Value)> = graph
            .inputs
            .iter()
            .map(|i| {
                let pos = (0..inputs.len())
                    .filter(|&k| k != weight)
                    .nth(
                        graph
                            .inputs
                            .iter()
                            .position(|x| x.name == i.name)
                            .expect("input"),
                    )
                    .expect("index");
                (i.name.clone(), Value::Host(inputs[pos].clone()))
            })
            .collect();
        let outs = pollster::block_on(session.run(feeds)).expect("runs");
        let got = pollster::block_on(session.read(&outs[0].1)).expect("reads");
        let exp = read("output_0.pb".into());
        let r = common::compare(&got, &exp, rtol, atol);
        assert!(
            r.is_ok(),
            "{name} with split weights: {}",
            r.err().unwrap_or_default()
        );
        n += 1;
    }
    assert!(
        n >= 20,
        "expected the quantised cases on both adapter kinds, found {n}"
    );
}

/// GatherBlockQuantized whose data, scales and zero points are all split by rows across
/// buffers, each at its own row boundaries (E2B's per-layer table: 262144 x 280 f32 scales pass
/// lavapipe's 128 MiB binding limit after the data does; rows past the scales' first part used to
/// read nothing): every row, from every part, equals its exact dequantisation
/// `(q - zp) * scale`, and the same session without splits.
#[test]
fn gather_block_quantized_with_split_scales_and_zero_points() {
    use gg_runtime::model::{InitData, Initializer};
    use gg_runtime::source::MemorySource;
    use gg_runtime::{DType, HostTensor, Session, Value};
    let case = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/ops/gatherblockquantized_b4_blk32_zp_float32");
    let mut graph = Graph::decode(
        &std::fs::read(case.join("model.onnx")).expect("model.onnx"),
        "gbq",
    )
    .expect("decodes");
    // 80 rows of K = 256 (8 blocks of 32): data 128 B, scales 32 B, zero points 4 B per row.
    let (rows, k, nb) = (80usize, 256usize, 8usize);
    let mut seed = 7u32;
    let mut next = || {
        seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
        seed >> 8
    };
    let data: Vec<u8> = (0..rows * k / 2).map(|_| next() as u8).collect();
    let scales: Vec<f32> = (0..rows * nb)
        .map(|_| (next() % 1000) as f32 / 997.0 + 0.01)
        .collect();
    let zp: Vec<u8> = (0..rows * nb / 2).map(|_| next() as u8).collect();
    let names: Vec<String> = graph.inputs.iter().map(|i| i.name.clone()).collect();
    assert_eq!(names.len(), 4, "data, indices, scales, zero points");
    let inits = [
        (names[0].clone(), DType::U8, vec![rows, k / 2], data.clone()),
        (
            names[2].clone(),
            DType::F32,
            vec![rows, nb],
            scales.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
        (names[3].clone(), DType::U8, vec![rows, nb / 2], zp.clone()),
    ];
    graph.inputs = vec![graph.inputs[1].clone()];
    for (name, dtype, shape, bytes) in inits {
        graph.initializers.push(Initializer {
            name,
            dtype,
            shape,
            data: InitData::Inline(bytes),
        });
    }
    let idx: Vec<i64> = vec![0, 79, 33, -1, 64, 17];
    let want: Vec<f32> = idx
        .iter()
        .flat_map(|&i| {
            let r = if i < 0 { i + rows as i64 } else { i } as usize;
            let (data, scales, zp) = (&data, &scales, &zp);
            (0..k).map(move |c| {
                let q = (data[r * k / 2 + c / 2] >> ((c % 2) * 4)) & 15;
                let b = c / 32;
                let z = (zp[r * nb / 2 + b / 2] >> ((b % 2) * 4)) & 15;
                (f32::from(q) - f32::from(z)) * scales[r * nb + b]
            })
        })
        .collect();
    for max in [None, Some(256u64)] {
        let mut gpu = pollster::block_on(Gpu::new(None)).expect("a GPU adapter");
        if let Some(m) = max {
            gpu.max_weight_part = m;
        }
        let session = pollster::block_on(Session::from_graph(
            Rc::new(gpu),
            graph.clone(),
            &MemorySource::new(),
        ))
        .expect("loads");
        assert_eq!(
            session.split_weights(),
            if max.is_some() { 3 } else { 0 },
            "data, scales and zero points split"
        );
        let feeds = vec![(
            graph.inputs[0].name.clone(),
            Value::Host(HostTensor::from_i64(vec![2, 3], &idx)),
        )];
        let outs = pollster::block_on(session.run(feeds)).expect("runs");
        let got = pollster::block_on(session.read(&outs[0].1))
            .expect("reads")
            .to_f32();
        assert_eq!(got.len(), want.len());
        let worst = got
            .iter()
            .zip(&want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(worst == 0.0, "split {max:?}: max |diff| {worst}");
    }
}

/// Runs the case `name` of tests/fixtures/ops against its ONNX Runtime outputs (rtol = atol =
/// `tol`; panics on a mismatch) and returns the dispatches it took.
fn case_dispatches(gpu: &Rc<Gpu>, name: &str, tol: f64) -> u64 {
    let case = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/ops")
        .join(name);
    let graph = Graph::decode(
        &std::fs::read(case.join("model.onnx")).expect("model.onnx"),
        name,
    )
    .expect("decodes");
    let before = gpu.counters.snapshot().dispatches;
    common::run_case(gpu, &case, graph, tol, tol).unwrap_or_else(|e| panic!("{name}: {e}"));
    gpu.counters.snapshot().dispatches - before
}

/// A prefill MatMulNBits with f16 activations stores f16 from its GEMM (one dispatch; the
/// software adapters' register-block GEMM and the GPUs' tiled one) when the columns pair up; an
/// odd N writes f32 and casts (two). Both match ONNX Runtime.
#[test]
fn f16_prefill_gemm_writes_f16_when_columns_pair_up() {
    for hardware in [false, true] {
        let gpu = pollster::block_on(Gpu::new(None)).expect("a GPU adapter (lavapipe natively)");
        let gpu = Rc::new(if hardware {
            common::as_hardware(gpu)
        } else {
            gpu
        });
        f16_prefill_gemm_on(&gpu);
    }
}

fn f16_prefill_gemm_on(gpu: &Rc<Gpu>) {
    let dispatches = |name: &str| case_dispatches(gpu, name, 5e-3);
    for name in [
        "matmulnbits_b4_blk32_k64_n72_m20_zp_float16_bias",
        "matmulnbits_b8_blk64_k72_n66_m17_zp_float16_bias",
        "matmulnbits_b4_blk16_k64_n130_m7_nozp_float16",
    ] {
        assert_eq!(dispatches(name), 1, "{name}: the GEMM stores f16 itself");
    }
    assert_eq!(
        dispatches("matmulnbits_b4_blk32_k64_n33_m5_zp_float16_bias"),
        2,
        "odd N: f32 GEMM + Cast"
    );
}

/// A float16 MatMul / Gemm of several rows stores f16 from its tiled GEMM (one dispatch) when N
/// is even; an odd N writes f32 and casts (two). All match ONNX Runtime.
#[test]
fn f16_float_gemm_writes_f16_when_columns_pair_up() {
    let gpu =
        Rc::new(pollster::block_on(Gpu::new(None)).expect("a GPU adapter (lavapipe natively)"));
    for name in [
        "std_matmul_batched_n66_float16",
        "std_matmul_m37_n130_float16",
        "std_gemm_transa_c_float16",
    ] {
        assert_eq!(
            case_dispatches(&gpu, name, 5e-3),
            1,
            "{name}: the GEMM stores f16 itself"
        );
    }
    assert_eq!(
        case_dispatches(&gpu, "std_matmul_n33_float16", 5e-3),
        2,
        "odd N: f32 GEMM + Cast"
    );
}

/// A prompt's attention on a software adapter (three register-blocked passes) takes its query
/// rows in chunks when their scores exceed `Gpu::attention_scratch`: three dispatches per chunk,
/// and still ONNX Runtime's outputs (the chunk's row offset reaches the causal and sliding-window
/// masks). With a scratch too small for one block of rows it falls back to the flash kernel.
#[test]
fn prompt_attention_takes_long_prompts_in_row_chunks() {
    let gpu = |scratch: Option<u64>| {
        let mut g = pollster::block_on(Gpu::new(None)).expect("a GPU adapter (lavapipe natively)");
        g.tuning.software = true;
        if let Some(b) = scratch {
            g.attention_scratch = b;
        }
        Rc::new(g)
    };
    let whole = gpu(None);
    let small = gpu(Some(8 << 10));
    let tiny = gpu(Some(64));
    // 8 heads on 1 kv head, D = 256, 21 tokens: 168 rows of 21 scores, 84 B a row; 8 KiB holds
    // 97 rows, so two chunks of 96 and 72. 6 heads on 3, window 9, 37 tokens: 74 rows of
    // 3 x 37 scores, 444 B a row; 8 KiB holds 18, so five chunks of 16 (the last 10).
    for (name, tol, extra) in [
        ("gqa_tile_prompt_d256", 1e-4, 3),
        ("gqa_tile_prompt_window_mh", 1e-4, 12),
    ] {
        let one = case_dispatches(&whole, name, tol);
        assert_eq!(
            case_dispatches(&small, name, tol),
            one + extra,
            "{name}: three dispatches per chunk"
        );
        // A 64-byte scratch holds no block of rows: the flash kernel, one dispatch for three.
        assert_eq!(
            case_dispatches(&tiny, name, tol),
            one - 2,
            "{name}: flash kernel"
        );
    }
}

/// Long decode contexts take the flash-decoding path (keys split across workgroups, then a combine
/// pass: two attention dispatches), short ones a single pass; both match ONNX Runtime above.
#[test]
fn long_decode_attention_is_split_and_short_is_one_pass() {
    let gpu =
        Rc::new(pollster::block_on(Gpu::new(None)).expect("a GPU adapter (lavapipe natively)"));
    let dispatches = |name: &str| case_dispatches(&gpu, name, 1e-4);
    // Both: one append of K (rotating the new keys) and V, then the attention (rotating Q and
    // writing y in the query's type), on adapters with 9 storage buffers per stage; with fewer,
    // the K and V appends and Q's rotary are separate dispatches.
    let wide = gpu.max_bindings() >= 9;
    let base = if wide { 2 } else { 4 };
    let short = dispatches("gqa_tile_decode_d512");
    let long = dispatches("gqa_tile_decode_long_split");
    assert_eq!(short, base, "one attention dispatch for 41 keys");
    assert_eq!(long, base + 1, "split attention + combine for 301 keys");
}

/// On adapters with fewer storage buffers per stage (WebGPU's default is 8), GroupQueryAttention
/// takes its narrower paths: below 9, K and V are appended by one dispatch each when they read
/// the pasts (below 7 when the pasts are this node's: copied into the presents, which are then
/// appended to in place, without past bindings); when the
/// attention with Q's rotary does not fit either (6 here), Q is rotated by a kernel of its own
/// first. Both match ONNX Runtime on every GQA case. When the rotary caches are initializers (as
/// in the exported models) they are packed into one binding at load: K and V are then appended
/// together at 8, and the attention with Q's rotary fits 6.
#[test]
fn gqa_cases_match_with_fewer_storage_bindings() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/ops");
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/ops exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("gqa"))
        })
        .collect();
    cases.sort();
    assert!(cases.len() >= 10, "GQA cases in {}", dir.display());
    for limit in [8, 6] {
        let mut gpu = pollster::block_on(Gpu::new(None)).expect("a GPU adapter");
        gpu.limits.max_storage_buffers_per_shader_stage = limit;
        let gpu = Rc::new(gpu);
        let (mut d_short, mut d_long, mut d_packed) = (0, 0, 0);
        for case in &cases {
            let name = case
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let meta: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(case.join("case.json")).expect("case.json"),
            )
            .expect("valid case.json");
            let graph = Graph::decode(
                &std::fs::read(case.join("model.onnx")).expect("model.onnx"),
                name,
            )
            .expect("decodes");
            let before = gpu.counters.snapshot().dispatches;
            common::run_case(
                &gpu,
                case,
                graph,
                meta["rtol"].as_f64().expect("rtol"),
                meta["atol"].as_f64().expect("atol"),
            )
            .unwrap_or_else(|e| panic!("{name} with {limit} storage bindings: {e}"));
            let n = gpu.counters.snapshot().dispatches - before;
            match name {
                "gqa_tile_decode_d512" => d_short = n,
                "gqa_tile_decode_long_split" => d_long = n,
                "gqa_cache_init_decode_rotary" => d_packed = n,
                _ => {}
            }
        }
        // The short case's past (40 rows) is this node's, but its buffer has no room for the
        // new row: copied into the presents, then K and V appended together in place at 8
        // (5 + the two rotary tables); at 6 each by its own, and Q rotated separately.
        let expect = if limit == 8 { 2 } else { 4 };
        assert_eq!(
            d_short, expect,
            "{limit} bindings: K, V appends (+ Q rotary) + attention"
        );
        // The long case's past (300 rows, uploaded into a pooled buffer with room for 320)
        // is this node's to keep: its cache grows in place, and without past bindings K and V
        // are appended by one dispatch at 8 (5 + the two rotary tables), not at 6.
        assert_eq!(
            d_long,
            if limit == 8 { 3 } else { 5 },
            "{limit} bindings: appends in place + the split attention + its combine"
        );
        // Packed caches: K and V appended by one dispatch at 8 (5 + 1 table + 2 pasts), each
        // by its own at 6; the attention rotates Q itself at both.
        assert_eq!(
            d_packed,
            if limit == 8 { 2 } else { 3 },
            "{limit} bindings, cos/sin caches packed: K+V append(s) + attention with Q's rotary"
        );
    }
}

/// GroupQueryAttention with zero new K/V tokens refuses inconsistent inputs with the reason:
/// no shared past, key and value not both empty, more tokens than the shared past holds, a
/// query that does not fit the past's head size, rotary tables with fewer rows than positions.
#[test]
fn group_query_attention_without_new_tokens_rejects_bad_inputs() {
    use gg_runtime::HostTensor;
    use gg_runtime::model::decode_tensor;
    use gg_runtime::source::MemorySource;
    let case = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/ops/gqa_shared_decode_rotary");
    let graph = Graph::decode(
        &std::fs::read(case.join("model.onnx")).expect("model.onnx"),
        "gqa_shared",
    )
    .expect("decodes");
    // Undeclared input shapes, so that the op sees the bad ones (the session checks declared
    // shapes first).
    let mut graph = graph;
    for i in &mut graph.inputs {
        i.dims = None;
    }
    let gpu =
        Rc::new(pollster::block_on(Gpu::new(None)).expect("a GPU adapter (lavapipe natively)"));
    let feeds: Vec<(String, HostTensor)> = graph
        .inputs
        .iter()
        .enumerate()
        .map(|(j, i)| {
            let p = case.join(format!("test_data_set_0/input_{j}.pb"));
            let t = decode_tensor(&std::fs::read(&p).expect("input"), &i.name).expect("tensor");
            (i.name.clone(), t)
        })
        .collect();
    let run = |graph: &Graph, feeds: Vec<(String, HostTensor)>| -> String {
        let s = pollster::block_on(gg_runtime::Session::from_graph(
            gpu.clone(),
            graph.clone(),
            &MemorySource::new(),
        ))
        .expect("loads");
        match pollster::block_on(s.run_host(feeds)) {
            Ok(_) => "ran".into(),
            Err(e) => e.to_string(),
        }
    };
    assert_eq!(run(&graph, feeds.clone()), "ran");
    let with = |name: &str, t: HostTensor| -> Vec<(String, HostTensor)> {
        feeds
            .iter()
            .map(|(n, v)| (n.clone(), if n == name { t.clone() } else { v.clone() }))
            .collect()
    };
    // The past omitted.
    let mut no_past = graph.clone();
    no_past.nodes[0].inputs[3].clear();
    no_past.nodes[0].inputs[4].clear();
    no_past.inputs.retain(|i| i.name != "pk" && i.name != "pv");
    let f: Vec<_> = feeds
        .iter()
        .filter(|(n, _)| n != "pk" && n != "pv")
        .cloned()
        .collect();
    let e = run(&no_past, f);
    assert!(
        e.contains("past_key and past_value (the shared cache) are required"),
        "{e}"
    );
    // Value with a token while key has none.
    let e = run(
        &graph,
        with("v", HostTensor::from_f32(vec![1, 1, 32], &[0.5; 32])),
    );
    assert!(
        e.contains("key and value must both be [1, 0, kv_hidden]"),
        "{e}"
    );
    // More tokens than the shared past's 9 rows.
    let e = run(
        &graph,
        with(
            "total",
            HostTensor::from_i64_as(gg_runtime::DType::I32, vec![], &[12]),
        ),
    );
    assert!(e.contains("exceeds the shared past's 9 rows"), "{e}");
    // Rotary tables shorter than the 9 positions (ONNX Runtime refuses them too); 9 rows do.
    let short = |rows: usize| {
        let mut f = with(
            "cos",
            HostTensor::from_f32(vec![rows, 16], &vec![1.0; rows * 16]),
        );
        for (n, v) in &mut f {
            if n == "sin" {
                *v = HostTensor::from_f32(vec![rows, 16], &vec![0.0; rows * 16]);
            }
        }
        f
    };
    let e = run(&graph, short(8));
    assert!(
        e.contains("cos_cache has 8 rows, fewer than the 9 positions"),
        "{e}"
    );
    assert_eq!(run(&graph, short(9)), "ran");
    // A query of 3 heads' width.
    let e = run(
        &graph,
        with("q", HostTensor::from_f32(vec![1, 1, 96], &[0.1; 96])),
    );
    assert!(
        e.contains("query hidden size 96 does not fit 4 heads of the shared cache's head size 32"),
        "{e}"
    );
}
