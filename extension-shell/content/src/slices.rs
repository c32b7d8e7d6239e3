//! Running calls in slices: the walks (`snapshot_page`, `read_page_content`, selector lookups)
//! work for at most [`SLICE_MS`] at a time and give the page's main thread back between slices.
//! Who schedules the slices is the caller's: the content script's server (`server`,
//! through the loader's `later`) or, in the `embedded` build, `embedded::PageTools`
//! (a `MessageChannel` of its own).

use wasm_bindgen::JsValue;

use crate::tools::{self, ToolErr};
use crate::{read, snapshot};

/// Longest run of work in one task (the page's long-task threshold is 50 ms). Short, because
/// the task that runs a slice may also carry the page's garbage collector: V8 finishes a major
/// collection inside whatever script runs when its marking is done ("finalize incremental
/// marking via stack guard"), and on a page of 100,000 elements that pause alone measured
/// 25-38 ms (headless Chromium, 2 cores); 4 ms of ours leaves room for it.
pub const SLICE_MS: f64 = 4.0;

#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn performance_now() -> f64;
}

/// `performance.now()` (the content script's own realm: the page cannot replace it; in the
/// `embedded` build it is the page's realm). Read before every element of a walk, so bound
/// directly: no property lookup, no string.
pub fn now() -> f64 {
    performance_now()
}

/// A call that runs in slices.
pub enum Work {
    Snapshot(snapshot::Job),
    Read(read::Job),
    /// A click, typing or the gate's element facts, looking its selector up first.
    Act(tools::ActJob),
    /// Development builds: a call that panics in its first slice (the e2e test of recovery).
    #[cfg(feature = "dev-log")]
    Panic,
}

impl Work {
    /// Its next slice should run after the page's next rendering update.
    pub fn wants_frame(&self) -> bool {
        matches!(self, Self::Act(job) if job.wants_frame())
    }

    /// Works until `until` (a `performance.now()` time); `Some` once finished.
    pub fn step(
        &mut self,
        state: &mut tools::State,
        until: f64,
    ) -> Option<Result<JsValue, ToolErr>> {
        match self {
            Self::Snapshot(job) => job.step(state.refs_mut(), until),
            Self::Read(job) => job.step(&mut state.read_cache, until),
            Self::Act(job) => job.step(state, until),
            #[cfg(feature = "dev-log")]
            Self::Panic => panic!("__debug_panic asked for a panic in a slice"),
        }
    }
}
