//! GPU adapter and device acquisition.

/// Human-readable descriptions of every adapter wgpu can see (native only).
#[cfg(not(target_arch = "wasm32"))]
pub fn list_adapters() -> Vec<String> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
        .into_iter()
        .map(|a| {
            let i = a.get_info();
            format!("{} ({:?}, {:?}, f16: {})", i.name, i.backend, i.device_type, a.features().contains(wgpu::Features::SHADER_F16))
        })
        .collect()
}
