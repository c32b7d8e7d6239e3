//! Every knob of the runtime in one place: [`Tuning`], chosen from the adapter
//! ([`Tuning::for_adapter`]) and, natively, overridden by `GG_*` environment variables
//! ([`Tuning::from_env`], the only place the runtime reads them). A [`crate::Gpu`] is opened with
//! one ([`crate::Gpu::with_tuning`]) and keeps it in [`crate::Gpu::tuning`]; sessions loaded on
//! it take their [`crate::SessionOptions`] from it.

#[cfg(not(target_arch = "wasm32"))]
use crate::error::{Error, Result};

/// Threads per workgroup of the fused GEMV: [`Tuning::gemv_tpc`] divides it.
pub const GEMV_WG: u32 = 64;

/// How the runtime drives one adapter. Every field has its default from [`Tuning::for_adapter`];
/// tests set fields to run another form of the kernels on the same adapter (setting one on an
/// open [`crate::Gpu`]'s `tuning` is safe: kernels are chosen, and their pipelines keyed, when a
/// session is loaded or an op records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// Kernels for a software rasterizer running them on the CPU (WebGPU's fallback adapter,
    /// SwiftShader, llvmpipe/lavapipe, WARP): invocations run one after another there, so kernels
    /// that split a dot product across invocations (and pay workgroup barriers to add it up)
    /// give each invocation whole dot products instead. Default: whether the adapter is one.
    pub software: bool,
    /// Open the device with subgroup operations where the adapter offers them (workgroup
    /// reductions then add up within each subgroup in registers; see [`crate::Gpu::subgroups`]).
    /// Default: true. `GG_SUBGROUPS=0` turns them off.
    pub subgroups: bool,
    /// Read quantized weights 16 bytes per load (`array<vec4<u32>>` bindings) where kernels can.
    /// Default: true on GPUs and on llvmpipe / lavapipe, false on other software adapters
    /// (SwiftShader, the browser's fallback adapter): SwiftShader runs a vec4 load per
    /// invocation as four gathers and then spills, and its fused GEMVs take twice as long,
    /// while lavapipe gains and GPUs read whole 16-byte blocks per lane (measurements in
    /// bench/README.md, "Tuning defaults"). `GG_GEMV_WIDE=0|1` overrides it.
    pub wide_weight_loads: bool,
    /// A submit returns while the GPU still runs the one before, so that the host can record the
    /// next step meanwhile (the generator's run-ahead). Default: false on llvmpipe / lavapipe,
    /// whose submit waits for the submit before it (running a step ahead cannot overlap there
    /// and measured slower); true elsewhere (GPUs, SwiftShader, measured not to block;
    /// browsers). Measurements in bench/README.md, "Tuning defaults".
    pub submits_overlap: bool,
    /// Plan for at most this many storage buffers per kernel, below the adapter's own limit (to
    /// reproduce a browser adapter's choices: WebGPU's default is 8, Chrome's SwiftShader offers
    /// 10). Default: none. `GG_MAX_STORAGE_BUFFERS=N` sets it.
    pub max_storage_buffers: Option<u32>,
    /// Threads per output column of the fused GEMV (a power of two up to [`GEMV_WG`]); `None`:
    /// 1 when [`Tuning::software`] (an invocation per column: no cross-lane sum, and 64 columns
    /// share each workgroup's prologue), else 8 (the lanes read consecutive quant blocks, then
    /// add up). `GG_GEMV_TPC=N` sets it. Read through [`Tuning::gemv_tpc`].
    pub gemv_tpc: Option<u32>,
    /// Workgroups the fused GEMV leaves at least when it gives each invocation several columns
    /// (REPS, up to 8); `None`: 4 when [`Tuning::software`] (a few cores run the workgroups one
    /// after another and each extra column shares every load of the row; bench/README.md,
    /// "Tuning defaults"), else 512 (to keep a GPU busy). `GG_GEMV_MIN_WG=N` sets it. Read
    /// through [`Tuning::gemv_min_workgroups`].
    pub gemv_min_workgroups: Option<u32>,
    /// Run the graph fusion pass ([`crate::fuse`]) on sessions loaded without explicit
    /// [`crate::SessionOptions`]. Default: true. `GG_NO_FUSE` (set to anything) turns it off.
    pub fuse: bool,
}

impl Tuning {
    /// The defaults for `adapter`: what the runtime does when no variable is set.
    pub fn for_adapter(adapter: &wgpu::AdapterInfo) -> Self {
        let software = is_software(adapter);
        let mesa_cpu = is_mesa_cpu(adapter);
        Self {
            software,
            subgroups: true,
            // Software adapters: only Mesa's llvmpipe / lavapipe is known to gain. In the browser
            // the adapter's name (its description) is often empty, so SwiftShader is recognised
            // there as the fallback adapter, with any other CPU adapter.
            wide_weight_loads: !software || mesa_cpu,
            submits_overlap: !mesa_cpu,
            max_storage_buffers: None,
            gemv_tpc: None,
            gemv_min_workgroups: None,
            fuse: true,
        }
    }

    /// [`Tuning::for_adapter`] with the `GG_*` environment variables applied (the table in
    /// runtime/README.md). A value that does not parse, or is out of range, is an error naming
    /// the variable (rather than silently ignored).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_env(adapter: &wgpu::AdapterInfo) -> Result<Self> {
        Self::for_adapter(adapter).with_vars(|name| std::env::var_os(name))
    }

    /// Applies the variables `var` returns (see [`Tuning::from_env`]).
    #[cfg(not(target_arch = "wasm32"))]
    fn with_vars(mut self, var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Result<Self> {
        let get = |name: &str| -> Result<Option<String>> {
            var(name)
                .map(|v| {
                    v.into_string()
                        .map(|s| s.trim().to_owned())
                        .map_err(|_| bad(name, "not UTF-8"))
                })
                .transpose()
        };
        let flag = |name: &str| -> Result<Option<bool>> {
            get(name)?
                .map(|v| match v.as_str() {
                    "0" => Ok(false),
                    "1" => Ok(true),
                    _ => Err(bad(name, &format!("{v:?}: expected 0 or 1"))),
                })
                .transpose()
        };
        let number = |name: &str, ok: fn(u32) -> bool, want: &str| -> Result<Option<u32>> {
            get(name)?
                .map(|v| match v.parse::<u32>() {
                    Ok(n) if ok(n) => Ok(n),
                    _ => Err(bad(name, &format!("{v:?}: expected {want}"))),
                })
                .transpose()
        };
        if let Some(on) = flag("GG_SUBGROUPS")? {
            self.subgroups = on;
        }
        if let Some(on) = flag("GG_GEMV_WIDE")? {
            self.wide_weight_loads = on;
        }
        if let Some(n) = number("GG_MAX_STORAGE_BUFFERS", |n| n > 0, "a positive integer")? {
            self.max_storage_buffers = Some(n);
        }
        if let Some(n) = number(
            "GG_GEMV_TPC",
            |n| n.is_power_of_two() && n <= GEMV_WG,
            "a power of two up to 64",
        )? {
            self.gemv_tpc = Some(n);
        }
        if let Some(n) = number("GG_GEMV_MIN_WG", |n| n > 0, "a positive integer")? {
            self.gemv_min_workgroups = Some(n);
        }
        if var("GG_NO_FUSE").is_some() {
            self.fuse = false;
        }
        Ok(self)
    }

    /// Threads per column of the fused GEMV (see [`Tuning::gemv_tpc`](field@Tuning::gemv_tpc)).
    pub fn gemv_tpc(&self) -> u32 {
        self.gemv_tpc.unwrap_or(if self.software { 1 } else { 8 })
    }

    /// Workgroups the fused GEMV leaves at least (see
    /// [`Tuning::gemv_min_workgroups`](field@Tuning::gemv_min_workgroups)).
    pub fn gemv_min_workgroups(&self) -> u32 {
        self.gemv_min_workgroups
            .unwrap_or(if self.software { 4 } else { 512 })
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn bad(name: &str, why: &str) -> Error {
    Error::Tuning(format!("{name}={why}"))
}

/// A CPU adapter: the device type says so (natively; in the browser, `isFallbackAdapter`), or
/// its name is one of the software rasterizers (browsers may not flag them as fallback).
pub(crate) fn is_software(i: &wgpu::AdapterInfo) -> bool {
    let name = i.name.to_lowercase();
    i.device_type == wgpu::DeviceType::Cpu
        || [
            "swiftshader",
            "llvmpipe",
            "lavapipe",
            "microsoft basic render",
        ]
        .iter()
        .any(|s| name.contains(s))
}

/// Mesa's CPU driver (llvmpipe, lavapipe under Vulkan).
fn is_mesa_cpu(i: &wgpu::AdapterInfo) -> bool {
    let name = i.name.to_lowercase();
    name.contains("llvmpipe") || name.contains("lavapipe")
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    fn info(name: &str, device_type: wgpu::DeviceType) -> wgpu::AdapterInfo {
        wgpu::AdapterInfo {
            name: name.into(),
            ..wgpu::AdapterInfo::new(device_type, wgpu::Backend::Noop)
        }
    }

    fn with(vars: &[(&str, &str)], base: Tuning) -> Result<Tuning> {
        base.with_vars(|n| {
            vars.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| std::ffi::OsString::from(v))
        })
    }

    #[test]
    fn defaults_follow_the_adapter_kind() {
        let gpu = Tuning::for_adapter(&info("NVIDIA H200", wgpu::DeviceType::DiscreteGpu));
        assert!(!gpu.software && gpu.wide_weight_loads && gpu.submits_overlap && gpu.fuse);
        assert_eq!((gpu.gemv_tpc(), gpu.gemv_min_workgroups()), (8, 512));
        let lavapipe = Tuning::for_adapter(&info("llvmpipe (LLVM 19)", wgpu::DeviceType::Cpu));
        assert!(lavapipe.software && lavapipe.wide_weight_loads && !lavapipe.submits_overlap);
        assert_eq!(
            (lavapipe.gemv_tpc(), lavapipe.gemv_min_workgroups()),
            (1, 4)
        );
        let swiftshader = Tuning::for_adapter(&info("SwiftShader Device", wgpu::DeviceType::Other));
        assert!(swiftshader.software && !swiftshader.wide_weight_loads);
        assert!(swiftshader.submits_overlap);
    }

    #[test]
    fn variables_override_and_bad_values_are_errors() {
        let base = Tuning::for_adapter(&info("llvmpipe", wgpu::DeviceType::Cpu));
        assert_eq!(with(&[], base).ok(), Some(base));
        let t = with(
            &[
                ("GG_SUBGROUPS", "0"),
                ("GG_GEMV_WIDE", "0"),
                ("GG_MAX_STORAGE_BUFFERS", "8"),
                ("GG_GEMV_TPC", "8"),
                ("GG_GEMV_MIN_WG", " 64 "),
                ("GG_NO_FUSE", ""),
            ],
            base,
        )
        .expect("valid values");
        assert!(!t.subgroups && !t.wide_weight_loads && !t.fuse);
        assert_eq!(t.max_storage_buffers, Some(8));
        assert_eq!((t.gemv_tpc(), t.gemv_min_workgroups()), (8, 64));
        for (name, value) in [
            ("GG_GEMV_TPC", "3"),
            ("GG_GEMV_TPC", "128"),
            ("GG_GEMV_MIN_WG", "0"),
            ("GG_GEMV_WIDE", "yes"),
            ("GG_SUBGROUPS", "off"),
            ("GG_MAX_STORAGE_BUFFERS", "eight"),
        ] {
            let e = with(&[(name, value)], base).expect_err(name).to_string();
            assert!(e.contains(name) && e.contains(value), "{e}");
        }
    }
}
