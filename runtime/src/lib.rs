//! Gemma Gem runtime: executes ONNX graphs on WebGPU through wgpu, natively and in the browser.

pub mod gpu;
