//! Fuzzes gg-runtime's model loader: arbitrary bytes as an ONNX `ModelProto` (decode, external
//! data references, the op registry's validation of every node's attributes), as a `TensorProto`
//! and as an `.npy` file. Checks: no panic, no abort, no runaway allocation — malformed input is
//! an error.
#![no_main]

use gg_runtime::model::{Graph, decode_tensor};
use gg_runtime::ops::Registry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(graph) = Graph::decode(data, "fuzz.onnx") {
        let _ = graph.external_files();
        let registry = Registry::default();
        let _ = registry.check(&graph);
        let _ = registry.build(&graph);
    }
    let _ = decode_tensor(data, "fuzz.pb");
    let _ = gg_runtime::npy::parse("fuzz.npy", data);
});
