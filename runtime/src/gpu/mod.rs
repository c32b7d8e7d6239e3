//! GPU context: adapter/device acquisition, WGSL kernels with typed parameters, the pipeline cache
//! and the counters used by the benchmarks.

mod counters;
mod device;
mod kernel;
mod kernel_build;
mod spec;
mod storage;

pub use counters::{CounterSnapshot, Counters};
pub use device::{Gpu, Pipeline};
pub use kernel::{Kernel, MAP_WG, PARAM_WORDS, softcap_wgsl, wgsl_f32};
pub use spec::{Bound, Compiled, Features, KernelSpec, Params, WgslField, wgsl_hash};
pub use storage::Storage;

/// Human-readable descriptions of every adapter wgpu can see (native only).
#[cfg(not(target_arch = "wasm32"))]
pub fn list_adapters() -> Vec<String> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
        .into_iter()
        .map(|a| describe(&a))
        .collect()
}

fn describe(a: &wgpu::Adapter) -> String {
    let i = a.get_info();
    let f = a.features();
    let sg = if f.contains(wgpu::Features::SUBGROUP) {
        format!("{}-{}", i.subgroup_min_size, i.subgroup_max_size)
    } else {
        "no".into()
    };
    format!(
        "{} ({:?}, {:?}, f16: {}, subgroups: {sg})",
        i.name,
        i.backend,
        i.device_type,
        f.contains(wgpu::Features::SHADER_F16)
    )
}
