//! GPU context: adapter/device acquisition, WGSL kernels with typed parameters, the pipeline cache
//! and the counters used by the benchmarks.

use crate::error::{Error, Result};
use crate::tensor::DType;
use crate::tuning::Tuning;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

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

/// Work counters (monotonic; take differences around a run).
#[derive(Debug, Default)]
pub struct Counters {
    /// Compute dispatches encoded.
    pub dispatches: Cell<u64>,
    /// Queue submits.
    pub submits: Cell<u64>,
    /// Bytes copied back from the GPU to the host.
    pub bytes_read_back: Cell<u64>,
    /// Bytes written from the host to the GPU.
    pub bytes_uploaded: Cell<u64>,
    /// GPU buffers created (weights, pool growth, staging).
    pub buffers_created: Cell<u64>,
    /// Compute pipelines compiled (pipeline cache misses).
    pub pipelines_compiled: Cell<u64>,
    /// Bind groups created (a dispatch reusing the bind group of an earlier one creates none).
    pub bind_groups_created: Cell<u64>,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CounterSnapshot {
    /// Compute dispatches encoded.
    pub dispatches: u64,
    /// Queue submits.
    pub submits: u64,
    /// Bytes read back to the host.
    pub bytes_read_back: u64,
    /// Bytes uploaded.
    pub bytes_uploaded: u64,
    /// GPU buffers created.
    pub buffers_created: u64,
    /// Pipelines compiled.
    pub pipelines_compiled: u64,
    /// Bind groups created.
    pub bind_groups_created: u64,
}

impl Counters {
    /// Current values.
    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            dispatches: self.dispatches.get(),
            submits: self.submits.get(),
            bytes_read_back: self.bytes_read_back.get(),
            bytes_uploaded: self.bytes_uploaded.get(),
            buffers_created: self.buffers_created.get(),
            pipelines_compiled: self.pipelines_compiled.get(),
            bind_groups_created: self.bind_groups_created.get(),
        }
    }
}

fn bump(c: &Cell<u64>, by: u64) {
    c.set(c.get() + by);
}

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
    /// an open device is always safe (tests do, to run both code paths on one adapter).
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

/// How a tensor of a given dtype is laid out in a GPU buffer (an `array<u32>` binding, or
/// `array<vec4<u32>>` for [`Kernel::input_wide`]: the same words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Storage {
    /// One f32 per word.
    F32,
    /// Two f16 per word (low half first).
    F16,
    /// One i32 per word (int64 is narrowed on upload).
    I32,
    /// One bool per word (0/1).
    Bool,
    /// Four bytes per word.
    U8,
    /// Four signed bytes per word.
    I8,
}

impl Storage {
    /// GPU layout of a dtype (`None` for host-only types).
    pub fn of(dtype: DType) -> Option<Self> {
        Some(match dtype {
            DType::F32 => Self::F32,
            DType::F16 => Self::F16,
            DType::I32 | DType::I64 => Self::I32,
            DType::Bool => Self::Bool,
            DType::U8 => Self::U8,
            DType::I8 => Self::I8,
            DType::F64 => return None,
        })
    }

    /// Bytes a tensor of `n` elements occupies.
    pub fn bytes(self, n: usize) -> u64 {
        let b = match self {
            Self::F32 | Self::I32 | Self::Bool => n * 4,
            Self::F16 => n.div_ceil(2) * 4,
            Self::U8 | Self::I8 => n.div_ceil(4) * 4,
        };
        b.max(4) as u64
    }

    /// Elements per 32-bit word.
    pub fn per_word(self) -> u32 {
        match self {
            Self::F32 | Self::I32 | Self::Bool => 1,
            Self::F16 => 2,
            Self::U8 | Self::I8 => 4,
        }
    }
}

#[derive(Debug, Clone)]
struct Binding {
    name: String,
    storage: Storage,
    write: bool,
    /// Declared as `array<vec4<u32>>` (see [`Kernel::input_wide`]).
    wide: bool,
}

/// A WGSL kernel: a `.wgsl` body plus typed parameters. The generated header declares one
/// `array<u32>` binding per tensor (`array<vec4<u32>>` for [`Kernel::input_wide`]) with typed
/// accessors:
/// - inputs `x`: `ld_x(i) -> f32` (any storage), `ldi_x(i) -> i32`, `ldw_x(w) -> u32` (raw word),
///   and for wide inputs `ldv_x(v) -> vec4<u32>` (words `4v .. 4v + 3`);
/// - outputs `y`: `st_y(w, v0, v1)` stores word `w` (elements `w*EPW_y`, `+1`), `stw_y(w, u32)`,
///   `stf_y(i, f32)` (only for one-element-per-word outputs) and the constant `EPW_y`;
/// - `prm[i]` reads word `i` (< 64) of the per-dispatch sizes/strides: a uniform block (always the
///   last binding), so it takes none of the adapter's storage-buffer slots (`Gpu::max_bindings`).
///
/// Parameters `{{KEY}}` in the body are replaced by typed values; the pipeline cache key is the
/// kernel name plus every binding storage and parameter.
#[derive(Debug, Clone)]
pub struct Kernel {
    name: &'static str,
    body: &'static str,
    bindings: Vec<Binding>,
    params: Vec<(String, String)>,
    workgroup: u32,
    /// Outputs of the element-mapped `main` (none: the body has its own).
    map_outputs: Vec<String>,
    /// WGSL placed after the bindings' accessors, before the body (see [`Kernel::alias`]).
    extra: String,
    /// WGSL appended to the body, parameters included (see [`Kernel::wg_reduce`]).
    tail: &'static str,
    /// [`Kernel::key`], computed on first use (every builder method clears it): a kernel kept
    /// across runs (an op's memo) is hashed once.
    key: std::cell::OnceCell<u128>,
    /// A builder that records nothing ([`Kernel::discard`]).
    discard: bool,
}

/// The workgroup reductions `wg_sum` / `wg_max` through workgroup memory ...
const WG_REDUCE: &str = include_str!("kernels/wg_reduce.wgsl");
/// ... and with subgroup operations.
const WG_REDUCE_SG: &str = include_str!("kernels/wg_reduce_sg.wgsl");

/// The attention-score softcap `v = c * tanh(v / c)` as a WGSL statement on variable `v` (the
/// clamp keeps `tanh` finite on every backend); empty when `c <= 0` (no softcap).
pub fn softcap_wgsl(v: &str, c: f32) -> String {
    if c > 0.0 {
        let c = wgsl_f32(c);
        format!("{v} = {c} * tanh(clamp({v} / {c}, -15.0, 15.0));")
    } else {
        String::new()
    }
}

/// An `f32` value as WGSL, bit-exact. Finite values are constant expressions
/// (`bitcast<f32>(...u)`); NaN and infinities go through the header's `f32_bits`, a function call
/// and so not a constant expression: Chrome's WGSL compiler (Tint) rejects constant expressions
/// whose value is not a finite `f32`, which wgpu's naga accepts.
pub fn wgsl_f32(v: f32) -> String {
    if v.is_finite() {
        format!("bitcast<f32>({}u)", v.to_bits())
    } else {
        format!("f32_bits({}u)", v.to_bits())
    }
}

/// Words of the per-dispatch parameter block (`prm`), a uniform `array<vec4<u32>, 16>`.
pub const PARAM_WORDS: usize = 64;

/// `prm[expr]` -> `prm_at(expr)` (the block is read as vec4 words), brackets matched.
fn param_reads(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(i) = rest.find("prm[") {
        let prev = rest[..i].chars().next_back();
        out.push_str(&rest[..i]);
        if prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.push_str("prm[");
            rest = &rest[i + 4..];
            continue;
        }
        out.push_str("prm_at(");
        let body = &rest[i + 4..];
        let mut depth = 0usize;
        let mut end = body.len();
        for (j, c) in body.char_indices() {
            match c {
                '[' => depth += 1,
                ']' if depth == 0 => {
                    end = j;
                    break;
                }
                ']' => depth -= 1,
                _ => {}
            }
        }
        out.push_str(&body[..end]);
        out.push(')');
        rest = body.get(end + 1..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

/// Workgroup size of element-mapped kernels.
pub const MAP_WG: u32 = 64;

impl Kernel {
    /// A kernel from a WGSL body (usually `include_str!("kernels/x.wgsl")`).
    pub fn new(name: &'static str, body: &'static str) -> Self {
        Self {
            name,
            body,
            bindings: Vec::new(),
            params: Vec::new(),
            workgroup: MAP_WG,
            map_outputs: Vec::new(),
            extra: String::new(),
            tail: "",
            key: std::cell::OnceCell::new(),
            discard: false,
        }
    }

    /// A builder whose methods do nothing: for an op that already holds the kernel these calls
    /// would make (see `exec::recipe_kernel`) but runs the same code to collect its bindings.
    pub(crate) fn discard() -> Self {
        Self {
            discard: true,
            ..Self::new("discarded", "")
        }
    }

    /// Every builder method's change: skipped by a discarding builder, and clearing the cached
    /// key otherwise.
    fn edit(mut self, change: impl FnOnce(&mut Self)) -> Self {
        if !self.discard {
            self.key.take();
            change(&mut self);
        }
        self
    }

    /// Adds the workgroup reductions `wg_sum(t, v)` and `wg_max(t, v)` (and the scratch
    /// `red: array<f32, WG>`) for a body whose `main` ends its parameter list with `{{SG}}` and
    /// starts with `{{SG_INIT}}`. With `subgroups` (the device's [`Gpu::subgroups`]) they
    /// reduce within subgroups first (`wg_reduce_sg.wgsl`); otherwise as a tree in workgroup
    /// memory (`wg_reduce.wgsl`).
    pub fn wg_reduce(self, subgroups: bool) -> Self {
        if subgroups {
            self.edit(|k| k.tail = WG_REDUCE_SG)
                // No `enable subgroups;`: naga (wgpu 30) rejects the directive and takes the
                // built-ins on the device's SUBGROUP feature alone.
                .code(
                    "SG",
                    ", @builtin(subgroup_id) sg_id_in: u32, @builtin(num_subgroups) sg_n_in: u32, \
                 @builtin(subgroup_invocation_id) sg_lane_in: u32, \
                 @builtin(subgroup_size) sg_size_in: u32",
                )
                .code(
                    "SG_INIT",
                    "sg_id = sg_id_in; sg_n = sg_n_in; sg_lane = sg_lane_in; sg_size = sg_size_in;",
                )
        } else {
            self.edit(|k| k.tail = WG_REDUCE)
                .code("SG", "")
                .code("SG_INIT", "")
        }
    }

    /// An input read from a range of an input already declared (`of`, with the same
    /// storage): `ld_{name}(i)` reads element `i + offset` of `of`, without a binding of its
    /// own. For tensors packed into one buffer (e.g. the rotary cos and sin caches), so that
    /// they take one storage-buffer slot. `offset` is in elements.
    pub fn alias(self, name: &str, of: &str, offset: u64) -> Self {
        self.edit(|k| {
            k.extra.push_str(&format!(
                "fn ld_{name}(i: u32) -> f32 {{ return ld_{of}(i + {offset}u); }}\n"
            ));
        })
    }

    /// Declares an input tensor binding.
    /// Binding names must not shadow the accessor parameters (`i`, `w`, `v`, `v0`, `v1`).
    pub fn input(self, name: &str, storage: Storage) -> Self {
        self.binding(name, storage, false, false)
    }

    /// [`Kernel::input`] declared as `array<vec4<u32>>`, with `ldv_{name}(v) -> vec4<u32>`
    /// reading words `4v .. 4v + 3` in one load besides the usual accessors: for weights read
    /// 16 bytes at a time. The tensor's byte offset must be a multiple of 16 (binding offsets
    /// are: the storage offset alignment is at least 32); a tail shorter than 16 bytes is
    /// unreadable, so the tensor's bytes that are read must end on a 16-byte boundary too.
    pub fn input_wide(self, name: &str, storage: Storage) -> Self {
        self.binding(name, storage, false, true)
    }

    /// Declares an output tensor binding.
    pub fn output(self, name: &str, storage: Storage) -> Self {
        self.binding(name, storage, true, false)
    }

    /// Declares a tensor binding (see [`Kernel::input`], [`Kernel::input_wide`],
    /// [`Kernel::output`]).
    fn binding(self, name: &str, storage: Storage, write: bool, wide: bool) -> Self {
        self.edit(|k| {
            k.bindings.push(Binding {
                name: name.into(),
                storage,
                write,
                wide,
            })
        })
    }

    /// Adds the standard element-mapped `main`: the body defines `fn compute(i: u32) -> f32` and
    /// each invocation writes one word of `output` (`meta[0]` = element count).
    pub fn mapped(self, output: &str) -> Self {
        self.edit(|k| {
            k.map_outputs = vec![output.into()];
        })
    }

    /// The element-mapped `main` for two outputs of the same storage: the body defines
    /// `fn compute2(i: u32) -> vec2<f32>` (element i of `a`, of `b`).
    pub fn mapped_pair(self, a: &str, b: &str) -> Self {
        self.edit(|k| {
            k.map_outputs = vec![a.into(), b.into()];
        })
    }

    /// A `u32` parameter (`{{KEY}}` becomes `123u`).
    pub fn u32(self, key: &str, v: u32) -> Self {
        self.edit(|k| {
            k.params.push((key.into(), format!("{v}u")));
        })
    }

    /// An `i32` parameter (`{{KEY}}` becomes `-3i`).
    pub fn i32(self, key: &str, v: i32) -> Self {
        self.edit(|k| {
            k.params.push((key.into(), format!("{v}i")));
        })
    }

    /// An `f32` parameter, written exactly (bit pattern through `bitcast`).
    pub fn f32(self, key: &str, v: f32) -> Self {
        self.edit(|k| {
            k.params.push((key.into(), wgsl_f32(v)));
        })
    }

    /// A `bool` parameter.
    pub fn bool(self, key: &str, v: bool) -> Self {
        self.edit(|k| {
            k.params.push((key.into(), v.to_string()));
        })
    }

    /// A WGSL code fragment (an expression or statement chosen from a fixed set by the op).
    pub fn code(self, key: &str, wgsl: &str) -> Self {
        self.edit(|k| {
            k.params.push((key.into(), wgsl.into()));
        })
    }

    /// Sets the workgroup size (`{{WG}}` in the body).
    pub fn workgroup(self, wg: u32) -> Self {
        self.edit(|k| {
            k.workgroup = wg;
        })
    }

    /// Number of tensor bindings (meta comes after them).
    pub fn n_bindings(&self) -> usize {
        self.bindings.len()
    }

    /// Workgroup size.
    pub fn workgroup_size(&self) -> u32 {
        self.workgroup
    }

    /// Kernel name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The pipeline cache key: a 128-bit hash of the name, the workgroup size, the bindings and
    /// every parameter (the body is the name's; an appended tail is told apart by its length),
    /// computed without building a string of them: the fused kernels' parameters are whole code
    /// fragments, and a decode step looks up ~100 kernels.
    pub(crate) fn key(&self) -> u128 {
        *self.key.get_or_init(|| self.compute_key())
    }

    fn compute_key(&self) -> u128 {
        use std::hash::Hash;
        let mut h = xxhash_rust::xxh3::Xxh3Default::new();
        self.name.hash(&mut h);
        self.workgroup.hash(&mut h);
        self.map_outputs.hash(&mut h);
        for b in &self.bindings {
            (&b.name, b.storage, b.write, b.wide).hash(&mut h);
        }
        for (p, v) in &self.params {
            (p, v).hash(&mut h);
        }
        self.extra.hash(&mut h);
        self.tail.len().hash(&mut h);
        h.digest128()
    }

    fn source(&self) -> Result<String> {
        // A runtime bitcast for NaN/infinity constants (see `wgsl_f32`).
        let mut s = String::from("fn f32_bits(b: u32) -> f32 { return bitcast<f32>(b); }\n");
        for (i, b) in self.bindings.iter().enumerate() {
            let n = &b.name;
            let access = if b.write { "read_write" } else { "read" };
            let elem = if b.wide { "vec4<u32>" } else { "u32" };
            s.push_str(&format!(
                "@group(0) @binding({i}) var<storage, {access}> {n}: array<{elem}>;\n"
            ));
            // Word `x` of the binding (an expression of `i` or `w`).
            let word = |x: &str| {
                if b.wide {
                    format!("{n}[({x}) >> 2u][({x}) & 3u]")
                } else {
                    format!("{n}[{x}]")
                }
            };
            let (ld, ldi) = match b.storage {
                Storage::F32 => (
                    format!("bitcast<f32>({})", word("i")),
                    format!("i32(bitcast<f32>({}))", word("i")),
                ),
                Storage::F16 => (
                    format!("unpack2x16float({})[i & 1u]", word("i >> 1u")),
                    format!("i32(unpack2x16float({})[i & 1u])", word("i >> 1u")),
                ),
                Storage::I32 => (
                    format!("f32(bitcast<i32>({}))", word("i")),
                    format!("bitcast<i32>({})", word("i")),
                ),
                Storage::Bool => (format!("f32({})", word("i")), format!("i32({})", word("i"))),
                Storage::U8 => (
                    format!("f32(({} >> ((i & 3u) * 8u)) & 0xffu)", word("i >> 2u")),
                    format!("i32(({} >> ((i & 3u) * 8u)) & 0xffu)", word("i >> 2u")),
                ),
                Storage::I8 => (
                    format!(
                        "f32((bitcast<i32>({}) << (24u - (i & 3u) * 8u)) >> 24u)",
                        word("i >> 2u")
                    ),
                    format!(
                        "(bitcast<i32>({}) << (24u - (i & 3u) * 8u)) >> 24u",
                        word("i >> 2u")
                    ),
                ),
            };
            s.push_str(&format!("fn ld_{n}(i: u32) -> f32 {{ return {ld}; }}\n"));
            s.push_str(&format!("fn ldi_{n}(i: u32) -> i32 {{ return {ldi}; }}\n"));
            s.push_str(&format!(
                "fn ldw_{n}(w: u32) -> u32 {{ return {}; }}\n",
                word("w")
            ));
            if b.wide {
                s.push_str(&format!(
                    "fn ldv_{n}(v: u32) -> vec4<u32> {{ return {n}[v]; }}\n"
                ));
            }
            if b.write {
                let epw = b.storage.per_word();
                s.push_str(&format!("const EPW_{n}: u32 = {epw}u;\n"));
                let st = match b.storage {
                    Storage::F32 => format!("{n}[w] = bitcast<u32>(v0);"),
                    Storage::F16 => format!("{n}[w] = pack2x16float(vec2<f32>(v0, v1));"),
                    Storage::I32 => format!("{n}[w] = bitcast<u32>(i32(v0));"),
                    Storage::Bool => format!("{n}[w] = select(0u, 1u, v0 != 0.0);"),
                    Storage::U8 | Storage::I8 => {
                        return Err(Error::Gpu(format!(
                            "kernel {}: byte outputs are not supported",
                            self.name
                        )));
                    }
                };
                s.push_str(&format!("fn st_{n}(w: u32, v0: f32, v1: f32) {{ {st} }}\n"));
                s.push_str(&format!("fn stw_{n}(w: u32, v: u32) {{ {n}[w] = v; }}\n"));
                if epw == 1 {
                    s.push_str(&format!(
                        "fn stf_{n}(i: u32, v: f32) {{ st_{n}(i, v, 0.0); }}\n"
                    ));
                }
            }
        }
        s.push_str(&format!(
            "@group(0) @binding({}) var<uniform> prm_u: array<vec4<u32>, {}>;\n\
             fn prm_at(i: u32) -> u32 {{ return prm_u[i >> 2u][i & 3u]; }}\nconst WG: u32 = {}u;\n",
            self.bindings.len(),
            PARAM_WORDS / 4,
            self.workgroup
        ));
        s.push_str(&self.extra);
        let mut body = format!("{}\n{}", self.body, self.tail);
        for (k, v) in &self.params {
            body = body.replace(&format!("{{{{{k}}}}}"), v);
        }
        body = body.replace("{{WG}}", &self.workgroup.to_string());
        if let Some(start) = body.find("{{") {
            let end = body[start..]
                .find("}}")
                .map_or(body.len(), |e| start + e + 2);
            return Err(Error::Gpu(format!(
                "kernel {}: parameter {} was not given",
                self.name,
                &body[start..end]
            )));
        }
        s.push_str(&body);
        let (compute, zero, stores) = match self.map_outputs.as_slice() {
            [] => ("", "", String::new()),
            [out] => ("compute", "0.0", format!("st_{out}(w, v0, v1);")),
            [a, b, ..] => (
                "compute2",
                "vec2<f32>(0.0, 0.0)",
                format!("st_{a}(w, v0.x, v1.x);\n    st_{b}(w, v0.y, v1.y);"),
            ),
        };
        if let Some(out) = self.map_outputs.first() {
            s.push_str(&format!(
                "
@compute @workgroup_size({wg})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let w = gid.x + gid.y * nwg.x * {wg}u;
    let n = prm[0];
    let i0 = w * EPW_{out};
    if (i0 >= n) {{ return; }}
    let v0 = {compute}(i0);
    var v1 = {zero};
    if (EPW_{out} == 2u && i0 + 1u < n) {{ v1 = {compute}(i0 + 1u); }}
    {stores}
}}
",
                wg = self.workgroup
            ));
        }
        Ok(param_reads(&s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_reads_go_through_the_uniform_block() {
        assert_eq!(
            param_reads("let a = prm[0] + prm[b[i + 1u]] * qprm[2]; // prm: [n]"),
            "let a = prm_at(0) + prm_at(b[i + 1u]) * qprm[2]; // prm: [n]"
        );
        let src = Kernel::new("t", "fn compute(i: u32) -> f32 { return f32(prm[1]); }")
            .input("x", Storage::F32)
            .output("y", Storage::F32)
            .mapped("y")
            .source()
            .expect("source");
        assert!(
            src.contains("var<uniform> prm_u: array<vec4<u32>, 16>;"),
            "{src}"
        );
        assert!(!src.contains("prm["), "{src}");
    }

    #[test]
    fn f32_literals_are_bit_exact_and_non_finite_ones_are_not_constant_expressions() {
        assert_eq!(
            wgsl_f32(1.5),
            format!("bitcast<f32>({}u)", 1.5f32.to_bits())
        );
        assert_eq!(wgsl_f32(f32::MIN), "bitcast<f32>(4286578687u)");
        assert_eq!(wgsl_f32(f32::NEG_INFINITY), "f32_bits(4286578688u)");
        assert!(wgsl_f32(f32::NAN).starts_with("f32_bits("));
        let k = Kernel::new("t", "fn compute(i: u32) -> f32 { return {{V}}; }")
            .output("y", Storage::F32)
            .f32("V", f32::INFINITY)
            .mapped("y");
        let src = k.source().unwrap();
        assert!(src.starts_with("fn f32_bits(b: u32) -> f32"));
        assert!(src.contains("return f32_bits(2139095040u);"));
        // No literal a strict WGSL compiler would reject.
        assert!(!src.contains("e38"));
    }
}
