//! The device: adapter/device acquisition, limits, the pipeline cache and error capture.

use super::counters::{Counters, bump};
use super::describe;
use super::kernel::Kernel;
use crate::error::{Error, Result};
use crate::tuning::Tuning;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// Device, queue, pipeline cache and counters.
pub struct Gpu {
    /// The device.
    pub device: wgpu::Device,
    /// Its queue.
    pub queue: wgpu::Queue,
    /// Adapter description.
    pub adapter: String,
    /// The limits the device was created with (the adapter's own).
    pub limits: wgpu::Limits,
    /// Whether the adapter offers `shader-f16` (not required: f16 is unpacked in f32).
    pub has_shader_f16: bool,
    /// Whether the device was opened with subgroup operations: the adapter offers them and
    /// [`Tuning::subgroups`] did not turn them off. Workgroup reductions then add up within each
    /// subgroup in registers and pass one value per subgroup through workgroup memory
    /// ([`Kernel::wg_reduce`]). Native only: wgpu's WebGPU backend does not map the browser's
    /// `subgroups` feature yet, so in the browser this is always false. Setting it to false on
    /// an open device is safe; tests open a device with `Tuning::subgroups` off instead, to run both
    /// code paths on one adapter.
    pub subgroups: bool,
    /// The smallest and largest subgroup sizes the adapter may use (meaningful with
    /// `subgroups`): kernels that need a group of lanes inside one subgroup check it against
    /// the minimum, and that their workgroups are whole subgroups against the maximum.
    pub subgroup_sizes: (u32, u32),
    /// The knobs the device was opened with ([`Gpu::with_tuning`]): which kernels the ops and
    /// the fusion pass choose (software forms, wide weight loads, the fused GEMV's shape), the
    /// generator's run-ahead, and whether sessions fuse by default. Setting a field on an open
    /// device is safe (tests do, to run every form on one adapter); `subgroups` and
    /// `max_storage_buffers` only take effect when a device is opened.
    pub tuning: Tuning,
    /// Weights larger than this many bytes are split by rows across buffers (defaults to the
    /// adapter's `max_storage_buffer_binding_size`; lower it to test or to save address space).
    pub max_weight_part: u64,
    /// The largest score scratch (bytes) of a prompt's attention on software adapters
    /// (`ops/attention/regs.rs`, default 64 MiB, never above `max_weight_part`): longer prompts
    /// take their query rows in chunks that fit it. Lower it to test.
    pub attention_scratch: u64,
    /// Counters.
    pub counters: Counters,
    pipelines: RefCell<HashMap<u128, Rc<Pipeline>>>,
    /// Compiled kernels by spec key ([`Gpu::kernel`]).
    pub(super) kernels: RefCell<HashMap<u128, Rc<super::Compiled>>>,
    errors: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// A compiled kernel and its explicit bind group layout (unused bindings stay bindable).
#[derive(Debug)]
pub struct Pipeline {
    /// The pipeline.
    pub pipeline: wgpu::ComputePipeline,
    /// Layout of group 0: the tensors in declaration order, then `meta`.
    pub layout: wgpu::BindGroupLayout,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("adapter", &self.adapter)
            .finish_non_exhaustive()
    }
}

impl Gpu {
    /// [`Gpu::with_tuning`] with the tuning of the platform: natively [`Tuning::from_env`] (the
    /// `GG_*` variables over the adapter's defaults), in the browser [`Tuning::for_adapter`].
    pub async fn new(adapter: Option<&str>) -> Result<Self> {
        #[cfg(not(target_arch = "wasm32"))]
        return Self::with_tuning(adapter, Tuning::from_env).await;
        #[cfg(target_arch = "wasm32")]
        Self::with_tuning(adapter, |a| Ok(Tuning::for_adapter(a))).await
    }

    /// Opens a device on the first adapter whose description contains `adapter` (case-insensitive),
    /// or the default adapter when `None`, with the knobs `tuning` chooses for that adapter (e.g.
    /// [`Tuning::for_adapter`], or a test's variation of it). Environment: `WGPU_BACKEND` etc.
    /// are honoured natively.
    pub async fn with_tuning(
        adapter: Option<&str>,
        tuning: impl FnOnce(&wgpu::AdapterInfo) -> Result<Tuning>,
    ) -> Result<Self> {
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let chosen = match adapter {
            #[cfg(not(target_arch = "wasm32"))]
            Some(want) => {
                let all = instance.enumerate_adapters(wgpu::Backends::all()).await;
                let names: Vec<String> = all.iter().map(describe).collect();
                let want_l = want.to_lowercase();
                let pos = names
                    .iter()
                    .position(|n| n.to_lowercase().contains(&want_l))
                    .ok_or_else(|| {
                        Error::Gpu(format!(
                            "no adapter matches {want:?}; available: {}",
                            names.join("; ")
                        ))
                    })?;
                all.into_iter()
                    .nth(pos)
                    .ok_or_else(|| Error::Gpu("adapter vanished".into()))?
            }
            _ => instance
                .request_adapter(&wgpu::RequestAdapterOptions {
                    power_preference: wgpu::PowerPreference::HighPerformance,
                    ..Default::default()
                })
                .await
                .map_err(|e| Error::Gpu(format!("no GPU adapter: {e}")))?,
        };
        let tuning = tuning(&chosen.get_info())?;
        Self::from_adapter(&chosen, tuning).await
    }

    /// Opens a device on a given adapter with `tuning`, requesting its real limits (at most
    /// [`Tuning::max_storage_buffers`] storage buffers per kernel where set: the runtime plans for
    /// those).
    pub async fn from_adapter(adapter: &wgpu::Adapter, tuning: Tuning) -> Result<Self> {
        let limits = adapter.limits();
        let has_shader_f16 = adapter.features().contains(wgpu::Features::SHADER_F16);
        let subgroups = tuning.subgroups && adapter.features().contains(wgpu::Features::SUBGROUP);
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("gg-runtime"),
                required_features: if subgroups {
                    wgpu::Features::SUBGROUP
                } else {
                    wgpu::Features::empty()
                },
                required_limits: limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| Error::Gpu(format!("request_device: {e}")))?;
        let limits = {
            let mut l = limits;
            if let Some(n) = tuning.max_storage_buffers {
                l.max_storage_buffers_per_shader_stage =
                    l.max_storage_buffers_per_shader_stage.min(n);
            }
            l
        };
        let errors = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = errors.clone();
        device.on_uncaptured_error(std::sync::Arc::new(move |e: wgpu::Error| {
            if let Ok(mut v) = sink.lock() {
                v.push(e.to_string());
            }
        }));
        Ok(Self {
            max_weight_part: limits
                .max_storage_buffer_binding_size
                .min(limits.max_buffer_size),
            attention_scratch: 64 << 20,
            errors,
            device,
            queue,
            adapter: describe(adapter),
            tuning,
            limits,
            has_shader_f16,
            subgroups,
            subgroup_sizes: {
                let i = adapter.get_info();
                (i.subgroup_min_size, i.subgroup_max_size)
            },
            counters: Counters::default(),
            pipelines: RefCell::new(HashMap::new()),
            kernels: RefCell::new(HashMap::new()),
        })
    }

    /// Creates a storage buffer (counted).
    pub fn create_buffer(&self, size: u64, label: &str) -> wgpu::Buffer {
        bump(&self.counters.buffers_created, 1);
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: size.max(4).next_multiple_of(4),
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    /// The compute pipeline for `kernel`, compiled once per distinct key.
    pub fn pipeline(&self, kernel: &Kernel) -> Result<Rc<Pipeline>> {
        let key = kernel.key();
        if let Some(p) = self.pipelines.borrow().get(&key) {
            return Ok(p.clone());
        }
        let src = kernel.source()?;
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(kernel.name),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            });
        let storage = |i: usize, read_only: bool| wgpu::BindGroupLayoutEntry {
            binding: i as u32,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let mut entries: Vec<_> = kernel
            .bindings
            .iter()
            .enumerate()
            .map(|(i, b)| storage(i, !b.write))
            .collect();
        entries.push(wgpu::BindGroupLayoutEntry {
            binding: kernel.bindings.len() as u32,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        });
        let layout = self
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(kernel.name),
                entries: &entries,
            });
        let pl = self
            .device
            .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(kernel.name),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(kernel.name),
                layout: Some(&pl),
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        // Compilation errors are reported synchronously natively: never cache a broken pipeline.
        self.take_error()
            .map_err(|e| Error::Gpu(format!("kernel {}: {e}", kernel.name)))?;
        let p = Rc::new(Pipeline { pipeline, layout });
        bump(&self.counters.pipelines_compiled, 1);
        self.pipelines.borrow_mut().insert(key, p.clone());
        Ok(p)
    }

    /// Takes the GPU validation/device errors reported since the last call, as one error.
    pub fn take_error(&self) -> Result<()> {
        let mut v = self
            .errors
            .lock()
            .map_err(|_| Error::Gpu("error log poisoned".into()))?;
        if v.is_empty() {
            return Ok(());
        }
        let all = std::mem::take(&mut *v);
        Err(Error::Gpu(all.join("; ").replace('\n', " ")))
    }

    /// Tensors one kernel may bind: the adapter's storage buffers per shader stage (the
    /// parameter block is a uniform buffer and takes none of them).
    pub fn max_bindings(&self) -> u32 {
        self.limits.max_storage_buffers_per_shader_stage
    }

    pub(crate) fn count_dispatch(&self) {
        bump(&self.counters.dispatches, 1);
    }
    pub(crate) fn count_submit(&self) {
        bump(&self.counters.submits, 1);
    }
    pub(crate) fn count_read_back(&self, n: u64) {
        bump(&self.counters.bytes_read_back, n);
    }
    pub(crate) fn count_upload(&self, n: u64) {
        bump(&self.counters.bytes_uploaded, n);
    }

    /// Waits for submitted work (native: blocks; wasm: no-op, map callbacks run on the event loop).
    pub fn poll_wait(&self) {
        self.poll_until(None);
    }

    /// Waits for one submit (`None`: the latest) and runs the callbacks of what it completed
    /// (native: blocks; wasm: no-op, map callbacks run on the event loop). Work submitted after
    /// it may still be running when this returns.
    pub fn poll_until(&self, submission: Option<wgpu::SubmissionIndex>) {
        #[cfg(not(target_arch = "wasm32"))]
        {
            let _ = self.device.poll(wgpu::PollType::Wait {
                submission_index: submission,
                timeout: None,
            });
        }
        #[cfg(target_arch = "wasm32")]
        let _ = submission;
    }
}
