//! WGSL kernels with typed parameters: the builder, its constants and literal helpers.

#[cfg(doc)]
use super::Gpu;
use super::Storage;

#[derive(Debug, Clone)]
pub(crate) struct Binding {
    pub(crate) name: String,
    pub(crate) storage: Storage,
    pub(super) write: bool,
    /// Declared as `array<vec4<u32>>` (see [`Kernel::input_wide`]).
    pub(super) wide: bool,
}

/// A WGSL kernel: a `.wgsl` body plus typed parameters. The generated header declares one
/// `array<u32>` binding per tensor (`array<vec4<u32>>` for [`Kernel::input_wide`]) with typed
/// accessors:
/// - inputs `x`: `ld_x(i) -> f32` (any storage), `ldi_x(i) -> i32`, `ldw_x(w) -> u32` (raw word),
///   and for wide inputs `ldv_x(v) -> vec4<u32>` (words `4v .. 4v + 3`);
/// - outputs `y`: `st_y(w, v0, v1)` stores word `w` (elements `w*EPW_y`, `+1`), `stw_y(w, u32)`,
///   `stf_y(i, f32)` (only for one-element-per-word outputs) and the constant `EPW_y`;
/// - `prm.field` reads the per-dispatch parameters, a [`Params`](super::Params) struct declared
///   with [`Kernel::params`]: a uniform block (always the last binding), so it takes none of the
///   adapter's storage-buffer slots (`Gpu::max_bindings`).
///
/// Parameters `{{KEY}}` in the body are replaced by typed values. Kernels are built by a
/// [`KernelSpec`](super::KernelSpec) and kept by [`Gpu::kernel`](super::Gpu::kernel); the
/// pipeline under them is kept by [`Kernel::key`], a hash of the code (two specs whose code is
/// identical share one pipeline).
#[derive(Debug, Clone)]
pub struct Kernel {
    pub(super) name: &'static str,
    pub(super) body: &'static str,
    pub(crate) bindings: Vec<Binding>,
    pub(super) params: Vec<(String, String)>,
    pub(super) workgroup: u32,
    /// Outputs of the element-mapped `main` (none: the body has its own).
    pub(super) map_outputs: Vec<String>,
    /// WGSL placed after the bindings' accessors, before the body (see [`Kernel::alias`]).
    pub(super) extra: String,
    /// WGSL appended to the body, parameters included (see [`Kernel::wg_reduce`]).
    pub(super) tail: &'static str,
    /// The typed parameter block ([`Kernel::params`]): its type and WGSL declaration (required
    /// to build the kernel).
    pub(crate) block: Option<(std::any::TypeId, String)>,
}

/// The workgroup reductions `wg_sum` / `wg_max` through workgroup memory ...
const WG_REDUCE: &str = include_str!("../kernels/common/wg_reduce.wgsl");
/// ... and with subgroup operations.
const WG_REDUCE_SG: &str = include_str!("../kernels/common/wg_reduce_sg.wgsl");

/// Hash of the WGSL snippets the builder itself adds (part of every kernel spec's key).
pub(super) const SNIPPETS_HASH: u128 = super::spec::wgsl_hash(&[WG_REDUCE, WG_REDUCE_SG]);

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

/// Words of one dispatch's slot in the parameter arena: the largest [`Params`](super::Params)
/// struct (its uniform block `prm`).
pub const PARAM_WORDS: usize = 64;

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
            block: None,
        }
    }

    /// Every builder method's change.
    fn edit(mut self, change: impl FnOnce(&mut Self)) -> Self {
        change(&mut self);
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

    /// Declares the kernel's per-dispatch parameters as `P` (see [`gpu_params!`](crate::gpu_params)):
    /// the body reads them as `prm.field` (array fields also as `prm_field(i)`), and every
    /// dispatch passes a `P`. An element-mapped kernel's `P` starts with `n: u32` (the element
    /// count).
    pub fn params<P: super::Params>(self) -> Self {
        self.edit(|k| {
            k.block = Some((std::any::TypeId::of::<P>(), P::wgsl()));
        })
    }

    /// Sets the workgroup size (`{{WG}}` in the body).
    pub fn workgroup(self, wg: u32) -> Self {
        self.edit(|k| {
            k.workgroup = wg;
        })
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
        self.block.as_ref().map(|p| &p.1).hash(&mut h);
        h.digest128()
    }
}
