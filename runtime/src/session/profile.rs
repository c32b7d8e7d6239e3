//! Profiling: per kind of node, runs, dispatches and (natively) wall time.

use super::{OpProfile, Session};
use crate::exec::Ctx;
use crate::gpu::Gpu;
use std::collections::BTreeMap;

/// A clock for the profile: native only.
#[cfg(not(target_arch = "wasm32"))]
type Clock = std::time::Instant;
#[cfg(target_arch = "wasm32")]
type Clock = ();

pub(super) fn profile_clock(cx: &mut Ctx<'_>, gpu: &Gpu) -> Option<Clock> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        cx.flush();
        gpu.poll_wait();
        Some(std::time::Instant::now())
    }
    #[cfg(target_arch = "wasm32")]
    {
        let _ = (cx, gpu);
        None
    }
}

pub(super) fn profile_micros(cx: &mut Ctx<'_>, gpu: &Gpu, since: Option<Clock>) -> u64 {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let Some(t0) = since else { return 0 };
        cx.flush();
        gpu.poll_wait();
        t0.elapsed().as_micros() as u64
    }
    #[cfg(target_arch = "wasm32")]
    {
        let _ = (cx, gpu, since);
        0
    }
}

impl Session {
    /// Starts (clearing earlier counts) or stops counting dispatches per kind of node during
    /// [`Session::run`]; fused nodes count under their own kind (`Fused[...]`).
    pub fn set_profiling(&self, on: bool) {
        *self.profile.borrow_mut() = on.then(BTreeMap::new);
    }

    /// Dispatches per kind of node since [`Session::set_profiling`] (empty when off).
    pub fn profile(&self) -> Vec<(String, OpProfile)> {
        self.profile
            .borrow()
            .as_ref()
            .map(|p| p.iter().map(|(k, v)| (k.clone(), *v)).collect())
            .unwrap_or_default()
    }
}
