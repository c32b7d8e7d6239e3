//! Loader and session behaviour on a small hand-built model with external data: streaming across
//! chunk boundaries (unaligned chunks), errors that name the culprit, buffer reuse across runs.

mod common;

use gg_runtime::model::Graph;
use gg_runtime::proto::{self, tensor_proto, type_proto};
use gg_runtime::source::MemorySource;
use gg_runtime::{Error, Gpu, HostTensor, Session, Value};
use prost::Message;
use std::rc::Rc;

const N: usize = 2000;

fn vi(name: &str, elem: i32, dims: &[&str]) -> proto::ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| proto::tensor_shape_proto::Dimension {
            value: Some(match d.parse::<i64>() {
                Ok(v) => proto::tensor_shape_proto::dimension::Value::DimValue(v),
                Err(_) => proto::tensor_shape_proto::dimension::Value::DimParam((*d).to_string()),
            }),
            ..Default::default()
        })
        .collect();
    proto::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(proto::TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(proto::TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn external(name: &str, dims: &[i64], elem: i32, offset: u64, length: u64) -> proto::TensorProto {
    let kv = |k: &str, v: String| proto::StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    };
    proto::TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(elem),
        data_location: Some(tensor_proto::DataLocation::External as i32),
        external_data: vec![
            kv("location", "w.bin".into()),
            kv("offset", offset.to_string()),
            kv("length", length.to_string()),
        ],
        ..Default::default()
    }
}

/// Y = (X + W) * S, W: f32 [N] (GPU, external at offset 3), S: f32 [1] (host, external), then
/// Reshape by an external int64 shape; X: f32 [batch, N].
fn model(w_offset: u64) -> Vec<u8> {
    let node = |op: &str, i: &[&str], o: &str| proto::NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{op}_node")),
        input: i.iter().map(|s| (*s).to_string()).collect(),
        output: vec![o.into()],
        ..Default::default()
    };
    let g = proto::GraphProto {
        name: Some("loader".into()),
        node: vec![
            node("Add", &["X", "W"], "A"),
            node("Mul", &["A", "S"], "B"),
            node("Reshape", &["B", "shape"], "Y"),
        ],
        initializer: vec![
            external("W", &[N as i64], 1, w_offset, (N * 4) as u64),
            external("S", &[1], 1, w_offset + (N * 4) as u64, 4),
            external("shape", &[2], 7, w_offset + (N * 4) as u64 + 4, 16),
        ],
        input: vec![vi("X", 1, &["batch", &N.to_string()])],
        output: vec![vi("Y", 1, &["batch", "?"])],
        ..Default::default()
    };
    proto::ModelProto {
        ir_version: Some(10),
        opset_import: vec![proto::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(g),
        ..Default::default()
    }
    .encode_to_vec()
}

fn weights() -> (Vec<f32>, Vec<u8>) {
    let w: Vec<f32> = (0..N).map(|i| (i as f32).sin()).collect();
    let mut bytes = vec![7u8, 7, 7];
    bytes.extend(w.iter().flat_map(|v| v.to_le_bytes()));
    bytes.extend(0.5f32.to_le_bytes());
    bytes.extend(2i64.to_le_bytes());
    bytes.extend((-1i64).to_le_bytes());
    (w, bytes)
}

fn gpu() -> Rc<Gpu> {
    Rc::new(pollster::block_on(Gpu::new(None)).expect("a GPU adapter (lavapipe natively)"))
}

#[test]
fn every_chunk_size_delivers_the_same_weights() {
    // the weights start 3 bytes into the file: words split across chunks of every phase,
    // chunks shorter than a word, and the whole file in one chunk
    let (w, data) = weights();
    let gpu = gpu();
    let x: Vec<f32> = (0..N).map(|i| (i % 11) as f32 * 0.5).collect();
    for chunk in [1, 2, 3, 4, 5, 6, 9, 4096] {
        let mut src = MemorySource::new().with_chunk(chunk);
        src.insert("m.onnx", model(3));
        src.insert("w.bin", data.clone());
        let session = pollster::block_on(Session::load(gpu.clone(), &src, "m.onnx"))
            .unwrap_or_else(|e| panic!("chunk {chunk}: {e}"));
        let out = pollster::block_on(session.run_host(vec![(
            "X".to_string(),
            HostTensor::from_f32(vec![1, N], &x),
        )]))
        .unwrap_or_else(|e| panic!("chunk {chunk}: {e}"));
        let got = out[0].1.to_f32();
        for (i, g) in got.iter().enumerate() {
            let want = (x[i] + w[i]) * 0.5;
            assert!(
                (g - want).abs() <= 1e-6,
                "chunk {chunk}, index {i}: got {g} expected {want}"
            );
        }
    }
}

#[test]
fn streams_external_data_in_unaligned_chunks_and_reuses_buffers() {
    let (w, data) = weights();
    let mut src = MemorySource::new().with_chunk(7);
    src.insert("m.onnx", model(3));
    src.insert("w.bin", data);
    let gpu = gpu();
    let session = pollster::block_on(Session::load(gpu.clone(), &src, "m.onnx")).expect("loads");
    let x: Vec<f32> = (0..2 * N).map(|i| (i % 13) as f32 * 0.25).collect();
    let feeds = || vec![("X".to_string(), HostTensor::from_f32(vec![2, N], &x))];
    let first = pollster::block_on(session.run_host(feeds())).expect("runs");
    let warm = gpu.counters.snapshot();
    let second = pollster::block_on(session.run_host(feeds())).expect("runs again");
    let after = gpu.counters.snapshot();
    assert_eq!(first, second);
    let (name, y) = &first[0];
    assert_eq!(name, "Y");
    assert_eq!(y.shape, vec![2, N]);
    let got = y.to_f32();
    for (i, g) in got.iter().enumerate() {
        let want = (x[i] + w[i % N]) * 0.5;
        assert!(
            (g - want).abs() <= 1e-6,
            "index {i}: got {g} expected {want}"
        );
    }
    assert_eq!(
        after.buffers_created, warm.buffers_created,
        "no GPU allocation after warm-up"
    );
    assert_eq!(
        after.pipelines_compiled, warm.pipelines_compiled,
        "pipelines are cached"
    );
    assert_eq!(
        after.dispatches - warm.dispatches,
        2,
        "Add and Mul are one dispatch each; Reshape is free"
    );
    assert_eq!(
        after.bytes_read_back - warm.bytes_read_back,
        (2 * N * 4) as u64,
        "only the output is read back"
    );
}

#[test]
fn offset_past_the_end_names_the_tensor_and_file() {
    let (_, data) = weights();
    let mut src = MemorySource::new();
    src.insert("m.onnx", model(40));
    src.insert("w.bin", data);
    let err = pollster::block_on(Session::load(gpu(), &src, "m.onnx")).expect_err("must fail");
    match &err {
        Error::ExternalData {
            location, reason, ..
        } => {
            assert_eq!(location, "w.bin");
            assert!(reason.contains("past the end"), "{err}");
        }
        other => panic!("unexpected error {other}"),
    }
}

#[test]
fn truncated_protobuf_is_a_decode_error() {
    let bytes = model(3);
    for cut in [1, bytes.len() / 2, bytes.len() - 1] {
        match Graph::decode(&bytes[..cut], "m.onnx") {
            Err(Error::Decode { .. } | Error::Invalid(_)) => {}
            Err(other) => panic!("cut {cut}: unexpected error {other}"),
            Ok(_) => panic!("cut {cut}: a truncated model decoded"),
        }
    }
}

#[test]
fn bad_inputs_are_rejected_with_the_input_name() {
    let (_, data) = weights();
    let mut src = MemorySource::new();
    src.insert("m.onnx", model(3));
    src.insert("w.bin", data);
    let session = pollster::block_on(Session::load(gpu(), &src, "m.onnx")).expect("loads");
    let run = |name: &str, t: HostTensor| {
        pollster::block_on(session.run(vec![(name.to_string(), Value::Host(t))]))
    };
    let err =
        run("nope", HostTensor::from_f32(vec![1, N], &vec![0.0; N])).expect_err("unknown input");
    assert!(
        matches!(&err, Error::Input { name, .. } if name == "nope"),
        "{err}"
    );
    let err = run("X", HostTensor::from_i64(vec![1, N], &vec![0; N])).expect_err("wrong dtype");
    assert!(
        matches!(&err, Error::Input { name, reason } if name == "X" && reason.contains("int64")),
        "{err}"
    );
    let err = run("X", HostTensor::from_f32(vec![1, 3], &[0.0; 3])).expect_err("wrong shape");
    assert!(
        matches!(&err, Error::Input { name, .. } if name == "X"),
        "{err}"
    );
    let err = pollster::block_on(session.run(vec![])).expect_err("missing input");
    assert!(
        matches!(&err, Error::Input { name, .. } if name == "X"),
        "{err}"
    );
}

/// Found by the `model_loader` fuzz target: a header whose shape claims terabytes, with no data,
/// must be a clear error, not an allocation abort.
#[test]
fn a_tensor_claiming_terabytes_is_an_error_not_an_abort() {
    for elem in [1, 7, 10, 11] {
        let t = proto::TensorProto {
            name: Some("huge".into()),
            dims: vec![1 << 20, 1 << 20, 1 << 3],
            data_type: Some(elem),
            ..Default::default()
        };
        let err = gg_runtime::model::decode_tensor(&t.encode_to_vec(), "huge.pb")
            .expect_err("a tensor without its data");
        assert!(err.to_string().contains("needs"), "{err}");
    }
}

/// Model-local functions (tests/fixtures/ops/function_model_local_inlined, written by
/// tools/onnx/gen_contrib_refs.py; its numerics against ONNX Runtime are checked by
/// tests/contrib_ops.rs): the two calls of the unregistered `test.fn:ScaledSoftmax` (and the
/// nested `test.fn:Square` in each) are inlined with fresh value names, the registered
/// SkipSimplifiedLayerNormalization keeps its kernel although the model defines it too.
#[test]
fn model_local_functions_are_inlined_unless_registered() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/ops/function_model_local_inlined/model.onnx");
    let bytes = std::fs::read(&path).expect("fixture");
    let g = Graph::decode(&bytes, "functions").expect("decodes");
    let calls: Vec<(&str, &str, usize)> = g
        .inlined
        .iter()
        .map(|c| (c.node.as_str(), c.op.as_str(), c.nodes))
        .collect();
    assert_eq!(
        calls,
        [
            ("call0/Square_2", "Square", 1),
            ("call0", "ScaledSoftmax", 8),
            ("call1/Square_2", "Square", 1),
            ("call1", "ScaledSoftmax", 8),
        ]
    );
    let ops: Vec<&str> = g.nodes.iter().map(|n| n.op_type.as_str()).collect();
    assert!(
        !ops.contains(&"ScaledSoftmax") && !ops.contains(&"Square"),
        "{ops:?}"
    );
    assert_eq!(
        ops.iter()
            .filter(|o| **o == "SkipSimplifiedLayerNormalization")
            .count(),
        1
    );
    assert!(
        !ops.contains(&"Sub"),
        "the registered op's function body is not used: {ops:?}"
    );
    // Every value is produced once: the bodies' `xa` and `t` do not clash with the graph's.
    let mut produced: Vec<&String> = g.nodes.iter().flat_map(|n| &n.outputs).collect();
    let n = produced.len();
    produced.sort();
    produced.dedup();
    assert_eq!(produced.len(), n, "{produced:?}");
    // The attributes: by reference (alpha), the function's default (beta, axis) or the call's.
    let softmax_axes: Vec<i64> = g
        .nodes
        .iter()
        .filter(|n| n.op_type == "Softmax")
        .map(|n| {
            n.attributes
                .iter()
                .find(|a| a.name() == "axis")
                .expect("axis")
                .i()
        })
        .collect();
    assert_eq!(softmax_axes, [-1, 1]);
    assert!(gg_runtime::ops::Registry::default().check(&g).is_empty());

    // Bad functions are refused with the reason: a function that calls itself, an attribute
    // the function does not declare.
    let mut m = proto::ModelProto::decode(bytes.as_slice()).expect("model");
    let sq = m
        .functions
        .iter_mut()
        .find(|f| f.name() == "Square")
        .expect("Square");
    sq.node[0].op_type = Some("Square".into());
    sq.node[0].domain = Some("test.fn".into());
    sq.node[0].input.truncate(1);
    let err = Graph::from_proto(&m).expect_err("recursion").to_string();
    assert!(err.contains("calls itself"), "{err}");
    let mut m = proto::ModelProto::decode(bytes.as_slice()).expect("model");
    let call = m
        .graph
        .as_mut()
        .expect("graph")
        .node
        .iter_mut()
        .find(|n| n.name() == "call0");
    call.expect("call0")
        .attribute
        .push(common::attr_i("gamma", 3));
    let err = Graph::from_proto(&m)
        .expect_err("unknown attribute")
        .to_string();
    assert!(
        err.contains("attribute gamma is not one of the function's"),
        "{err}"
    );
}
