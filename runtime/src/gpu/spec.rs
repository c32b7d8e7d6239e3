//! Kernel specs: what a kernel family's code depends on, as a hashable value looked up before
//! any WGSL is written ([`KernelSpec`], [`Gpu::kernel`]); bindings that carry their tensors
//! ([`Compiled::bind`]); per-dispatch parameters as `#[repr(C)]` structs whose WGSL `struct` is
//! generated from the same declaration ([`Params`], [`gpu_params!`](crate::gpu_params)).
//!
//! An op describes the kernel it needs by a spec (the storages of its tensors, the optional
//! inputs it has, the constants baked into the code, the variant chosen); the device keeps one
//! compiled kernel per spec, the hash of the family's `.wgsl` texts and the adapter features
//! ([`Features`]). The WGSL is generated only when that key is new. In debug builds every hit
//! builds the kernel again and asserts that its code is the cached one's, so a spec that misses
//! something the code depends on fails the tests.

use super::device::{Gpu, Pipeline};
use super::kernel::Kernel;
use crate::error::{Error, Result};
use crate::exec::GpuTensor;
use std::hash::Hash;
use std::rc::Rc;

/// The adapter features a kernel's code may depend on: part of every kernel's cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Features {
    /// Subgroup operations ([`Gpu::subgroups`]).
    pub subgroups: bool,
    /// The `shader-f16` feature ([`Gpu::has_shader_f16`]).
    pub shader_f16: bool,
}

/// What one kernel family's code depends on. `build` writes the kernel; it is called only when
/// the device has no kernel for this spec (and, in debug builds, on every hit, to check).
pub trait KernelSpec: Hash {
    /// The family's name: the pipelines' label, and the key's namespace (one spec type per
    /// name).
    const NAME: &'static str;
    /// Every `.wgsl` text the family's code is made from (bodies and snippets): their hash,
    /// computed at compile time, is part of the key.
    const WGSL: &'static [&'static str];
    /// Hash of [`KernelSpec::WGSL`].
    const WGSL_HASH: u128 = wgsl_hash(Self::WGSL);
    /// The kernel for this spec on an adapter with `features`.
    fn build(&self, features: &Features) -> Kernel;
}

/// A hash of WGSL texts, at compile time.
pub const fn wgsl_hash(texts: &[&str]) -> u128 {
    let mut h = 0u128;
    let mut i = 0;
    while i < texts.len() {
        h = h.rotate_left(7) ^ xxhash_rust::const_xxh3::xxh3_128(texts[i].as_bytes());
        i += 1;
    }
    h
}

/// A kernel ready to dispatch: its declaration (binding names and storages, parameter type,
/// workgroup size) and its pipeline.
#[derive(Debug)]
pub struct Compiled {
    pub(crate) kernel: Kernel,
    pub(crate) pipeline: Rc<Pipeline>,
    /// The kernel's code key (see the debug check in [`Gpu::kernel`]).
    code_key: u128,
}

impl Compiled {
    /// Kernel name.
    pub fn name(&self) -> &'static str {
        self.kernel.name()
    }

    /// Workgroup size.
    pub fn workgroup_size(&self) -> u32 {
        self.kernel.workgroup_size()
    }

    /// Binds tensor `t` to the binding called `name`: the start of the dispatch's bindings.
    pub fn bind<'k, 't>(&'k self, name: &str, t: &'t GpuTensor) -> Bound<'k, 't> {
        self.bindings().bind(name, t)
    }

    /// No binding yet (for kernels whose bindings are all optional or chosen in a loop).
    pub fn bindings<'t>(&self) -> Bound<'_, 't> {
        Bound {
            k: self,
            tensors: vec![None; self.kernel.bindings.len()],
            err: None,
        }
    }
}

/// A kernel with (some of) its tensors bound by name ([`Compiled::bind`]); recorded by
/// [`Ctx::launch`](crate::exec::Ctx::launch), which checks that every binding has a tensor.
pub struct Bound<'k, 't> {
    pub(crate) k: &'k Compiled,
    pub(crate) tensors: Vec<Option<&'t GpuTensor>>,
    err: Option<String>,
}

impl<'k, 't> Bound<'k, 't> {
    /// Binds `t` to the binding called `name`, whose declared storage it must have.
    pub fn bind(mut self, name: &str, t: &'t GpuTensor) -> Self {
        if self.err.is_some() {
            return self;
        }
        let kernel = &self.k.kernel;
        match kernel.bindings.iter().position(|b| b.name == name) {
            None => self.err = Some(format!("no binding named {name}")),
            Some(i) if self.tensors[i].is_some() => {
                self.err = Some(format!("binding {name} bound twice"));
            }
            Some(i) => {
                let want = kernel.bindings[i].storage;
                if t.storage() != want {
                    self.err = Some(format!(
                        "binding {name} is declared {want:?}, given a {:?} tensor",
                        t.storage()
                    ));
                } else {
                    self.tensors[i] = Some(t);
                }
            }
        }
        self
    }

    /// [`Bound::bind`] when `t` is present.
    pub fn bind_opt(self, name: &str, t: Option<&'t GpuTensor>) -> Self {
        match t {
            Some(t) => self.bind(name, t),
            None => self,
        }
    }

    /// The tensors in declaration order, once every binding has one.
    pub(crate) fn tensors(&self) -> Result<Vec<&'t GpuTensor>> {
        let kernel = &self.k.kernel;
        if let Some(e) = &self.err {
            return Err(Error::Gpu(format!("kernel {}: {e}", kernel.name())));
        }
        self.tensors
            .iter()
            .zip(&kernel.bindings)
            .map(|(t, b)| {
                t.ok_or_else(|| {
                    Error::Gpu(format!(
                        "kernel {}: binding {} has no tensor",
                        kernel.name(),
                        b.name
                    ))
                })
            })
            .collect()
    }
}

/// A WGSL type for a field of a [`Params`] struct: `u32`, `i32`, `f32`, or an array of them
/// whose length is a multiple of 4 (uniform arrays are arrays of `vec4`; the struct declares an
/// accessor `fn prm_{field}(i: u32)` for element `i`).
pub trait WgslField {
    /// Alignment in the uniform address space (4, or 16 for arrays).
    const ALIGN: usize;
    /// The WGSL type.
    fn wgsl_type() -> String;
    /// Accessors declared after the struct (none for scalars).
    fn accessor(_field: &str) -> String {
        String::new()
    }
}

macro_rules! wgsl_scalar {
    ($($t:ty => $w:literal),*) => {$(
        impl WgslField for $t {
            const ALIGN: usize = 4;
            fn wgsl_type() -> String {
                $w.into()
            }
        }
        impl<const N: usize> WgslField for [$t; N] {
            const ALIGN: usize = {
                assert!(N % 4 == 0, "a parameter array's length must be a multiple of 4");
                16
            };
            fn wgsl_type() -> String {
                format!("array<vec4<{}>, {}>", $w, N / 4)
            }
            fn accessor(field: &str) -> String {
                format!(
                    "fn prm_{field}(i: u32) -> {} {{ return prm.{field}[i >> 2u][i & 3u]; }}\n",
                    $w
                )
            }
        }
    )*};
}
wgsl_scalar!(u32 => "u32", i32 => "i32", f32 => "f32");

/// Per-dispatch parameters: a `#[repr(C)]` struct uploaded into the dispatch's slot of the
/// parameter arena and read in WGSL as the uniform `prm` (`prm.field`). Declared with
/// [`gpu_params!`](crate::gpu_params), which generates the WGSL `struct` from the same fields.
pub trait Params: bytemuck::Pod + 'static {
    /// The WGSL declaration: `struct Params { .. }` and the array fields' accessors.
    fn wgsl() -> String;
}

/// Declares a [`Params`] struct: `#[repr(C)]`, `Pod`, every field public, `Default` all zeros,
/// with the WGSL `struct Params` generated from the same fields (see [`WgslField`]). Array
/// fields must start on a 16-byte boundary (checked at compile time); the struct fits one
/// 256-byte parameter slot.
#[macro_export]
macro_rules! gpu_params {
    ($(#[$m:meta])* $vis:vis struct $name:ident {
        $($(#[$fm:meta])* $field:ident : $ty:ty),* $(,)?
    }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
        $vis struct $name {
            $($(#[$fm])* pub $field: $ty),*
        }
        impl Default for $name {
            fn default() -> Self {
                bytemuck::Zeroable::zeroed()
            }
        }
        impl $crate::gpu::Params for $name {
            fn wgsl() -> String {
                let mut s = String::from("struct Params {\n");
                $(
                    s.push_str("    ");
                    s.push_str(stringify!($field));
                    s.push_str(": ");
                    s.push_str(&<$ty as $crate::gpu::WgslField>::wgsl_type());
                    s.push_str(",\n");
                )*
                s.push_str("}\n");
                $(s.push_str(&<$ty as $crate::gpu::WgslField>::accessor(stringify!($field)));)*
                s
            }
        }
        const _: () = {
            $(assert!(
                <$ty as $crate::gpu::WgslField>::ALIGN == 4
                    || ::core::mem::offset_of!($name, $field) % 16 == 0,
                concat!(
                    stringify!($name), ".", stringify!($field),
                    ": a parameter array must start on a 16-byte boundary"
                )
            );)*
            assert!(
                ::core::mem::size_of::<$name>() <= 4 * $crate::gpu::PARAM_WORDS,
                concat!(stringify!($name), " does not fit a parameter slot")
            );
        };
    };
}

impl Gpu {
    /// The adapter features kernels are built for.
    pub fn features(&self) -> Features {
        Features {
            subgroups: self.subgroups,
            shader_f16: self.has_shader_f16,
        }
    }

    /// The compiled kernel for `spec`: looked up by the spec, the family's WGSL hash and the
    /// adapter features; built (WGSL written, pipeline compiled) only when new. Two specs whose
    /// code is identical share one pipeline. Debug builds build the kernel on every hit too and
    /// assert that its code is the cached one's.
    pub fn kernel<S: KernelSpec>(&self, spec: &S) -> Result<Rc<Compiled>> {
        let features = self.features();
        let mut h = xxhash_rust::xxh3::Xxh3Default::new();
        S::NAME.hash(&mut h);
        S::WGSL_HASH.hash(&mut h);
        super::kernel::SNIPPETS_HASH.hash(&mut h);
        features.hash(&mut h);
        spec.hash(&mut h);
        let key = h.digest128();
        if let Some(c) = self.kernels.borrow().get(&key).cloned() {
            if cfg!(debug_assertions) {
                let fresh = spec.build(&features);
                assert_eq!(
                    fresh.key(),
                    c.code_key,
                    "kernel {}: the spec misses something its code depends on",
                    S::NAME
                );
            }
            return Ok(c);
        }
        let kernel = spec.build(&features);
        let code_key = kernel.key();
        let pipeline = self.pipeline(&kernel)?;
        let c = Rc::new(Compiled {
            kernel,
            pipeline,
            code_key,
        });
        self.kernels.borrow_mut().insert(key, c.clone());
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::gpu_params! {
        /// A test block.
        struct P {
            n: u32,
            eps: f32,
            off: i32,
            pad: u32,
            dims: [u32; 8],
        }
    }

    #[test]
    fn params_declare_their_wgsl_struct_and_keep_the_uniform_layout() {
        let w = <P as Params>::wgsl();
        assert!(w.starts_with("struct Params {\n    n: u32,\n    eps: f32,\n    off: i32,\n"));
        assert!(w.contains("dims: array<vec4<u32>, 2>,\n}"), "{w}");
        assert!(w.contains("fn prm_dims(i: u32) -> u32 { return prm.dims[i >> 2u][i & 3u]; }"));
        let p = P {
            n: 3,
            dims: [1, 2, 3, 4, 5, 6, 7, 8],
            ..P::default()
        };
        let words: &[u32] = bytemuck::cast_slice(std::slice::from_ref(&p));
        assert_eq!(words.len(), 12);
        assert_eq!((words[0], words[4], words[11]), (3, 1, 8));
    }

    #[test]
    fn wgsl_hashes_tell_texts_apart() {
        assert_ne!(wgsl_hash(&["a", "b"]), wgsl_hash(&["b", "a"]));
        assert_ne!(wgsl_hash(&["a"]), wgsl_hash(&["a", ""]));
        assert_eq!(wgsl_hash(&["x y"]), wgsl_hash(&["x y"]));
    }
}
