//! Kernel memo layers: per op instance ([`KernelMemo`], under an [`input_signature`]) and per
//! recipe, shared by every instance of an op ([`recipe_kernel`], [`recipe_keep`]).

use super::Value;
use crate::gpu::Kernel;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// A 128-bit hash of everything about an op's inputs that the WGSL an op writes for them can
/// depend on: per input its presence, element type and shape; for a host value its bytes when
/// small (graph scalars, indices; larger host data is only uploaded); for a GPU tensor its byte
/// offset, whether it is a view, its row split, and which earlier input (if any) shares its
/// buffer. Ops that make their kernel's code from their inputs keep the last kernel under this
/// key ([`KernelMemo`]), so that a decode step, whose inputs look the same every time, does not
/// write and hash the code again.
pub(crate) fn input_signature(inputs: &[Option<&Value>]) -> u128 {
    use std::hash::Hash;
    let mut h = xxhash_rust::xxh3::Xxh3Default::new();
    inputs.len().hash(&mut h);
    for (i, v) in inputs.iter().enumerate() {
        match v {
            None => 0u8.hash(&mut h),
            Some(Value::Host(t)) => {
                1u8.hash(&mut h);
                (t.dtype, &t.shape).hash(&mut h);
                if t.data.len() <= 256 {
                    t.data.hash(&mut h);
                }
            }
            Some(Value::Gpu(t)) => {
                2u8.hash(&mut h);
                (t.dtype, &t.shape, t.view.map(|(o, _)| o)).hash(&mut h);
                let shared = inputs[..i].iter().position(|u| match u {
                    Some(Value::Gpu(u)) => u.shares_buffer(t),
                    _ => false,
                });
                shared.hash(&mut h);
                if let Some(parts) = &t.split {
                    for (r0, p) in parts.iter() {
                        (r0, &p.shape, p.view.map(|(o, _)| o)).hash(&mut h);
                    }
                }
            }
        }
    }
    h.digest128()
}

/// An op's last generated kernel, under the [`input_signature`] of the inputs it was made for.
/// In debug builds the op makes the kernel anyway and checks it against the memo (see
/// [`KernelMemo::check`]), so that the tests catch an input the signature misses.
#[derive(Default)]
pub(crate) struct KernelMemo(RefCell<Option<(u128, Rc<Kernel>)>>);

impl KernelMemo {
    /// The kernel made for inputs with signature `sig`, if it is the last one.
    pub(crate) fn get(&self, sig: u128) -> Option<Rc<Kernel>> {
        match &*self.0.borrow() {
            Some((s, k)) if *s == sig => Some(k.clone()),
            _ => None,
        }
    }

    /// Whether the op must write the kernel's code: on a miss, and always in debug builds.
    pub(crate) fn must_build(hit: &Option<Rc<Kernel>>) -> bool {
        hit.is_none() || cfg!(debug_assertions)
    }

    /// The kernel to run: the memo's (checked against the one just made, in debug builds), or
    /// `built`, which becomes the memo.
    pub(crate) fn check(&self, sig: u128, hit: Option<Rc<Kernel>>, built: Kernel) -> Rc<Kernel> {
        kept_or_built(hit, built, |k| *self.0.borrow_mut() = Some((sig, k)))
    }
}

/// `hit` (in debug builds asserted to have the key of `built`, the kernel made now: a
/// signature or recipe that misses something the code depends on fails the tests), or else
/// `built`, handed to `keep`.
fn kept_or_built(
    hit: Option<Rc<Kernel>>,
    built: Kernel,
    keep: impl FnOnce(Rc<Kernel>),
) -> Rc<Kernel> {
    match hit {
        Some(k) => {
            if cfg!(debug_assertions) {
                assert_eq!(
                    k.key(),
                    built.key(),
                    "kernel {}: the code kept for these inputs differs from the code made now",
                    built.name()
                );
            }
            k
        }
        None => {
            let k = Rc::new(built);
            keep(k.clone());
            k
        }
    }
}

/// Kernels kept under an op's own recipe key (a hash of what its code depends on), shared by
/// every instance of the op: e.g. all sliding-window layers' attention runs one kernel, made
/// once. [`recipe_kernel`] looks one up; [`recipe_keep`] keeps (or, in debug builds, checks) it.
const RECIPES_KEPT: usize = 4096;

thread_local! {
    static RECIPES: RefCell<HashMap<(&'static str, u128), Rc<Kernel>>> = RefCell::default();
}

/// A recipe key: the 128-bit hash of what a kernel's code depends on.
pub(crate) fn hash128(what: impl std::hash::Hash) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3Default::new();
    what.hash(&mut h);
    h.digest128()
}

/// The kernel kept under `(site, recipe)`, if any. The caller then builds with
/// [`recipe_builder`] (debug builds always build, and [`recipe_keep`] compares).
pub(crate) fn recipe_kernel(site: &'static str, recipe: u128) -> Option<Rc<Kernel>> {
    RECIPES.with(|r| r.borrow().get(&(site, recipe)).cloned())
}

/// The builder for an op that collects its bindings while it builds: `Kernel::new(name, body)`
/// where [`KernelMemo::must_build`] (a miss, or a debug build), else [`Kernel::discard`].
pub(crate) fn recipe_builder(
    hit: &Option<Rc<Kernel>>,
    name: &'static str,
    body: &'static str,
) -> Kernel {
    if KernelMemo::must_build(hit) {
        Kernel::new(name, body)
    } else {
        Kernel::discard()
    }
}

/// The kernel kept under `(site, recipe)`, or the one `make` makes (kept; in debug builds
/// always made and compared, see [`recipe_keep`]): for ops whose kernel is made apart from
/// their bindings.
pub(crate) fn recipe_made(
    site: &'static str,
    recipe: u128,
    make: impl FnOnce() -> Kernel,
) -> Rc<Kernel> {
    match recipe_kernel(site, recipe) {
        Some(k) if !cfg!(debug_assertions) => k,
        hit => recipe_keep(site, recipe, hit, make()),
    }
}

/// The kernel to run for `(site, recipe)`: the one kept (checked against `built` in debug
/// builds: a recipe that misses something the code depends on fails the tests), or `built`,
/// which is kept.
pub(crate) fn recipe_keep(
    site: &'static str,
    recipe: u128,
    hit: Option<Rc<Kernel>>,
    built: Kernel,
) -> Rc<Kernel> {
    kept_or_built(hit, built, |k| {
        RECIPES.with(|r| {
            let mut r = r.borrow_mut();
            if r.len() >= RECIPES_KEPT {
                r.clear();
            }
            r.insert((site, recipe), k);
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::{DType, HostTensor};

    fn sig(vs: &[Option<&Value>]) -> u128 {
        input_signature(vs)
    }

    #[test]
    fn input_signature_tells_apart_what_kernel_code_depends_on() {
        let s = |v: f32| Value::Host(HostTensor::from_f32(vec![1], &[v]));
        let (a, b) = (s(2.0), s(3.0));
        let row = Value::Host(HostTensor::from_f32(vec![1, 4], &[0.0; 4]));
        let col = Value::Host(HostTensor::from_f32(vec![4, 1], &[0.0; 4]));
        let wide = Value::Host(HostTensor::from_f32(vec![1, 1024], &[0.0; 1024]));
        let wide2 = Value::Host(HostTensor::from_f32(vec![1, 1024], &[1.0; 1024]));
        let half = Value::Host(HostTensor::from_f64_as(DType::F16, vec![1], &[2.0]));
        // The same inputs: the same signature.
        assert_eq!(sig(&[Some(&a), None]), sig(&[Some(&s(2.0)), None]));
        // A small host value (a graph scalar) is part of it; large host data is not.
        assert_ne!(sig(&[Some(&a)]), sig(&[Some(&b)]));
        assert_eq!(sig(&[Some(&wide)]), sig(&[Some(&wide2)]));
        // Shape, type, presence and position.
        assert_ne!(sig(&[Some(&row)]), sig(&[Some(&col)]));
        assert_ne!(sig(&[Some(&a)]), sig(&[Some(&half)]));
        assert_ne!(sig(&[Some(&a), None]), sig(&[None, Some(&a)]));
        assert_ne!(sig(&[Some(&a)]), sig(&[Some(&a), None]));
    }

    #[test]
    fn kernel_memo_keeps_the_last_kernel_under_its_signature() {
        let memo = KernelMemo::default();
        assert!(memo.get(1).is_none());
        let k = || Kernel::new("t", "fn compute(i: u32) -> f32 { return {{V}}; }");
        let made = memo.check(1, None, k().f32("V", 1.0));
        let hit = memo.get(1).expect("kept");
        assert!(Rc::ptr_eq(&made, &hit));
        assert!(memo.get(2).is_none());
        assert!(KernelMemo::must_build(&None));
        assert_eq!(
            KernelMemo::must_build(&Some(hit.clone())),
            cfg!(debug_assertions)
        );
        // The same code: the memo's kernel is run.
        let again = memo.check(1, Some(hit.clone()), k().f32("V", 1.0));
        assert!(Rc::ptr_eq(&again, &hit));
        // Different code under the same signature is a bug the debug build reports.
        if cfg!(debug_assertions) {
            let wrong = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                memo.check(1, Some(hit.clone()), k().f32("V", 2.0))
            }));
            assert!(wrong.is_err());
        }
        // A kernel's key is cached, and builder methods clear it.
        let k1 = k().f32("V", 1.0);
        let key = k1.key();
        assert_eq!(k1.clone().key(), key);
        assert_ne!(k1.u32("W", 3).key(), key);
    }
}
