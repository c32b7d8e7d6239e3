//! The fused GEMV's code: its kernel specs ([`FusedGemvSpec`], [`RowsPrologueSpec`]), their
//! parameters and the WGSL fragments they are written from. `gemv.rs` checks the operands and
//! fills the specs; the code here reads nothing but them.

use super::WG;
use crate::gpu::{Features, Kernel, KernelSpec, Storage, wgsl_f32};

/// The fused GEMV's body.
const FUSED_GEMV: &str = include_str!("../kernels/fuse/fused_gemv.wgsl");
/// The rows prologue's body.
const ROWS_PROLOGUE: &str = include_str!("../kernels/fuse/rows_prologue.wgsl");
/// The fused GEMV's per-column sum of its TPC lanes' partial sums (r0, r1 -> a0, a1): a tree in
/// workgroup memory ...
const REDUCE_TREE: &str = include_str!("../kernels/fuse/reduce_tree.wgsl");
/// ... or a butterfly of subgroup shuffles (the lanes are consecutive in one subgroup).
const REDUCE_SHUFFLE: &str = include_str!("../kernels/fuse/reduce_shuffle.wgsl");
/// The fused GEMV's residual prologue (`{eps}`, `{h}`, `{store}` filled in).
const RESIDUAL_PROLOGUE: &str = include_str!("../kernels/fuse/residual_prologue.wgsl");
/// The residual prologue's store of h by the first workgroup.
const STORE_H: &str = include_str!("../kernels/fuse/store_h.wgsl");
/// The fused GEMV's norm prologue (`{eps}` filled in).
const NORM_PROLOGUE: &str = include_str!("../kernels/fuse/norm_prologue.wgsl");
/// The fused GEMV's staging of the input row (no residual prologue).
const STAGE_ROW: &str = include_str!("../kernels/fuse/fused_gemv_stage_row.wgsl");
/// The zeros after the staged row, up to whole blocks.
const STAGE_PAD: &str = include_str!("../kernels/fuse/fused_gemv_stage_pad.wgsl");
/// The rows prologue's residual part (`{eps}`, `{h0}`, `{h1}` filled in).
const ROWS_RESIDUAL: &str = include_str!("../kernels/fuse/rows_prologue_residual.wgsl");
/// The rows prologue's sum of squares of the input row (no residual part).
const ROWS_ROW: &str = include_str!("../kernels/fuse/rows_prologue_row.wgsl");
/// The rows prologue's norm part (`{eps}`, `{src}` filled in).
const ROWS_NORM: &str = include_str!("../kernels/fuse/rows_prologue_norm.wgsl");

/// The most weights one fused GEMV reads.
pub(super) const MAX_MATS: usize = 3;
/// Binding names of the weights' own bits, scales and zero points.
pub(super) const QW: [&str; MAX_MATS] = ["qw0", "qw1", "qw2"];
/// See [`QW`].
pub(super) const SC: [&str; MAX_MATS] = ["sc0", "sc1", "sc2"];
/// See [`QW`].
pub(super) const ZP: [&str; MAX_MATS] = ["zp0", "zp1", "zp2"];
/// Binding names of separate results bound one by one.
pub(super) const Y: [&str; MAX_MATS] = ["y0", "y1", "y2"];

crate::gpu_params! {
    /// [`FusedGemvSpec`]'s parameters: the residual prologue's layer scalar, where the
    /// `Gelu(y) * other` epilogue's row starts, and the columns one dispatch computes (a lone
    /// weight split by rows across buffers is dispatched once per part, otherwise `0..NV`).
    pub(super) struct FusedGemvParams {
        /// The residual prologue's scalar (1 without one).
        scalar: f32,
        /// The element of `other` its row starts at.
        other_off: u32,
        /// The first column (the bound part's first row).
        first_col: u32,
        /// One past the last column.
        end_col: u32,
    }
}

crate::gpu_params! {
    /// [`RowsPrologueSpec`]'s parameters.
    pub(super) struct RowsPrologueParams {
        /// Rows (one workgroup each).
        rows: u32,
        /// The residual part's scalar (1 without one).
        scalar: f32,
    }
}

/// The residual prologue `h = res + RMSNorm(o) * g1 [* scalar]`, as its code sees it.
#[derive(Clone, Copy, Hash, PartialEq, Eq)]
pub(super) struct ResidualCode {
    /// The norm's epsilon (`f32::to_bits`).
    pub(super) eps: u32,
    /// Times the layer scalar (`prm.scalar`).
    pub(super) scaled: bool,
    /// The sum is normalised unrounded (a `SkipSimplifiedLayerNormalization`: it adds in f32
    /// and rounds only the sum it outputs), not rounded first as an `Add` node stores it.
    pub(super) skip: bool,
    /// The norm's scale's storage (F32, or F16 in float16 graphs).
    pub(super) g1: Storage,
}

impl ResidualCode {
    /// WGSL for h at column `l` of the row starting at element `base` (`""`: the fused GEMV's
    /// one row), as the unfused nodes compute it (rounded by `rd()` where they store f16).
    fn h(&self, base: &str, l: &str) -> String {
        let normed = format!("rd(ld_o({base}{l}) * inv1 * ld_g1({l}))");
        let h = if self.skip {
            format!("(ld_res({base}{l}) + {normed})")
        } else {
            format!("rd(ld_res({base}{l}) + {normed})")
        };
        if self.scaled {
            format!("rd({h} * scalar)")
        } else {
            h
        }
    }
}

/// Where one weight's bits, scales and zero points are read.
#[derive(Clone, Copy, Hash, PartialEq, Eq)]
pub(super) struct WeightCode {
    /// The scales' storage (a float weight's: its own storage, F32 or F16).
    pub(super) scales: Storage,
    /// Whether it has zero points (otherwise 8).
    pub(super) zp: bool,
    /// Its byte offsets in the group's one packed binding `wts` (`None`: bindings of its own).
    pub(super) packed: Option<PackedAt>,
}

/// A weight's byte offsets in the packed binding `wts`.
#[derive(Clone, Copy, Hash, PartialEq, Eq)]
pub(super) struct PackedAt {
    /// The bits (a float weight's elements).
    pub(super) bits: u64,
    /// The scales.
    pub(super) scales: u64,
    /// The zero points (0 without them).
    pub(super) zp: u64,
}

/// The fused GEMV's epilogue, as its code sees it.
#[derive(Clone, Copy, Hash, PartialEq, Eq)]
pub(super) enum EpilogueCode {
    /// Each weight's result stored: a lone one in binding `y0`, several as ranges of one
    /// binding `y` starting at these words.
    Separate {
        /// The results' first words in `y` (several results).
        packed: Option<[u32; MAX_MATS]>,
    },
    /// `Gelu(tanh)(y_gate) * y_up`; `gate` is the gate weight's index.
    GeluMul {
        /// The gate weight's index (0 or 1).
        gate: usize,
    },
    /// `Gelu(tanh)(y) * other[prm.other_off + n]`.
    GeluOther {
        /// The storage of `other`.
        other: Storage,
    },
    /// The logit softcap `c * tanh(y / c)`.
    Softcap {
        /// `c` (`f32::to_bits`).
        c: u32,
    },
    /// `y * c`.
    Scale {
        /// `c` (`f32::to_bits`).
        c: u32,
    },
}

/// What the fused GEMV's code depends on: the op's configuration (borrowed) and what one call's
/// operands and the device make of it.
#[derive(Hash)]
pub(super) struct FusedGemvSpec<'a> {
    /// Row length.
    pub(super) k: usize,
    /// Quant block (8 for float weights).
    pub(super) block: usize,
    /// Float weights (`[K, N]` of the activation type).
    pub(super) float: bool,
    /// Each weight's columns.
    pub(super) ns: &'a [usize],
    /// f16 activations (otherwise f32).
    pub(super) f16: bool,
    /// The row is staged in workgroup memory (otherwise read from memory).
    pub(super) staged: bool,
    /// The residual prologue (its operands `o`, `res`, `g1`; otherwise the row `x`).
    pub(super) residual: Option<ResidualCode>,
    /// The residual row h is an output (stored by the first workgroup).
    pub(super) h_out: bool,
    /// The norm prologue's epsilon (`f32::to_bits`; its scale `g2`).
    pub(super) norm_eps: Option<u32>,
    /// The norm prologue's scale's storage (F32, or F16 in float16 graphs).
    pub(super) g2: Storage,
    /// The weights (the first `ns.len()`).
    pub(super) weights: [Option<WeightCode>; MAX_MATS],
    /// The bits are read 16 bytes per load.
    pub(super) wide: bool,
    /// The epilogue.
    pub(super) epi: EpilogueCode,
    /// Threads per column.
    pub(super) tpc: u32,
    /// Column groups per invocation.
    pub(super) reps: u32,
    /// A column's lanes add up through subgroup shuffles.
    pub(super) shuffle: bool,
}

impl FusedGemvSpec<'_> {
    /// The activations' storage.
    fn act(&self) -> Storage {
        if self.f16 { Storage::F16 } else { Storage::F32 }
    }

    /// Blocks per row.
    fn nb(&self) -> usize {
        self.k.div_ceil(self.block)
    }

    /// Columns computed: every separate result's, or the one result's.
    pub(super) fn nv(&self) -> usize {
        match self.epi {
            EpilogueCode::Separate { .. } => self.ns.iter().sum(),
            _ => self.ns[0],
        }
    }

    /// The weights there are, with their indices.
    fn weights(&self) -> impl Iterator<Item = (usize, WeightCode)> + '_ {
        self.weights
            .iter()
            .enumerate()
            .filter_map(|(j, w)| Some((j, (*w)?)))
    }

    /// Whether the weights are ranges of one binding `wts`.
    fn packed(&self) -> bool {
        self.weights[0].is_some_and(|w| w.packed.is_some())
    }

    /// Storage buffers the kernel binds (the parameter block not included).
    pub(super) fn bindings(&self) -> usize {
        let row = if self.residual.is_some() { 3 } else { 1 };
        let weights: usize = if self.packed() {
            1
        } else {
            self.weights()
                .map(|(_, w)| match (self.float, w.zp) {
                    (true, _) => 1,
                    (false, zp) => 2 + usize::from(zp),
                })
                .sum()
        };
        let results = match self.epi {
            EpilogueCode::Separate { packed: None } => self.ns.len(),
            _ => 1,
        };
        row + usize::from(self.norm_eps.is_some())
            + weights
            + usize::from(matches!(self.epi, EpilogueCode::GeluOther { .. }))
            + usize::from(self.h_out)
            + results
    }

    /// The inputs and outputs, in binding order.
    fn declare(&self, mut k: Kernel) -> Kernel {
        let act = self.act();
        k = match self.residual {
            Some(r) => k.input("o", act).input("res", act).input("g1", r.g1),
            None => k.input("x", act),
        };
        if self.norm_eps.is_some() {
            k = k.input("g2", self.g2);
        }
        let bits = |k: Kernel, name: &str| {
            if self.wide {
                k.input_wide(name, Storage::U8)
            } else {
                k.input(name, Storage::U8)
            }
        };
        if self.packed() {
            k = bits(k, "wts");
        } else {
            for (j, w) in self.weights() {
                if self.float {
                    k = k.input(QW[j], w.scales);
                    continue;
                }
                k = bits(k, QW[j]).input(SC[j], w.scales);
                if w.zp {
                    k = k.input(ZP[j], Storage::U8);
                }
            }
        }
        if let EpilogueCode::GeluOther { other } = self.epi {
            k = k.input("other", other);
        }
        if self.h_out {
            k = k.output("h", act);
        }
        match self.epi {
            EpilogueCode::Separate { packed: None } => {
                for y in Y.iter().take(self.ns.len()) {
                    k = k.output(y, act);
                }
                k
            }
            _ => k.output("y", act),
        }
    }

    /// The prologue: the row staged (the residual prologue's h, or the input row), normalised,
    /// padded to whole blocks.
    fn prologue(&self) -> String {
        let mut pro = String::new();
        match self.residual {
            Some(r) => pro.push_str(&residual_prologue(&r, self.h_out)),
            None if self.staged => pro.push_str(STAGE_ROW),
            None => {}
        }
        if let Some(eps) = self.norm_eps {
            pro.push_str(&NORM_PROLOGUE.replace("{eps}", &wgsl_f32(f32::from_bits(eps))));
        }
        if self.staged {
            // The padding of the last block meets the weights' padding nibbles.
            pro.push_str(STAGE_PAD);
        }
        pro
    }

    /// The weights' `dot{j}` functions (and their loaders when packed), then the stores of
    /// several separate results.
    fn dots(&self) -> String {
        let mut dots = String::new();
        for (j, w) in self.weights() {
            if self.float {
                // A float weight's storage is its `scales` (the weight stands in for them).
                let ld = match (w.packed, w.scales) {
                    (Some(at), Storage::F16) => format!(
                        "unpack2x16float(ldw_wts((i >> 1u) + {}u))[i & 1u]",
                        at.bits / 4
                    ),
                    (Some(at), _) => format!("bitcast<f32>(ldw_wts(i + {}u))", at.bits / 4),
                    (None, _) => format!("ld_qw{j}(i)"),
                };
                dots.push_str(&float_dot(j, self.reps, self.ns[j], &ld));
                continue;
            }
            if let Some(at) = w.packed {
                dots.push_str(&packed_loaders(j, at, w.scales, w.zp, self.wide));
            }
            let zp_code = if w.zp {
                format!("f32((u32(ldi_zp{j}(n * ZROW + b / 2u)) >> ((b & 1u) * 4u)) & 15u)")
            } else {
                "8.0".to_string()
            };
            dots.push_str(&format!(
                "fn zero{j}(n: u32, b: u32) -> f32 {{ return {zp_code}; }}\n"
            ));
            dots.push_str(&gemv_dot(j, self.reps, self.wide));
        }
        if let EpilogueCode::Separate {
            packed: Some(words),
        } = self.epi
        {
            for (j, w) in words.iter().take(self.ns.len()).enumerate() {
                dots.push_str(&packed_store(j, &format!("{w}u")));
            }
        }
        dots
    }

    /// The epilogue's code: COMPUTE (the dot products of column v), VALUE (of the column's
    /// sums a0, a1) and STORE (words x0, x1).
    fn epilogue(&self) -> (String, String, String) {
        let one = |value: String| {
            (
                "p0 = dot0(v, lane);".to_string(),
                value,
                "st_y(v / EPW, x0, x1);".to_string(),
            )
        };
        match self.epi {
            EpilogueCode::Separate { .. } => {
                let mut compute = String::new();
                let mut store = String::new();
                let mut start = 0usize;
                for (j, &n) in self.ns.iter().enumerate() {
                    let end = start + n;
                    let (cond, els) = if j + 1 == self.ns.len() {
                        (String::new(), "")
                    } else {
                        (format!("if (v < {end}u) "), "else ")
                    };
                    compute.push_str(&format!(
                        "{cond}{{ p0 = dot{j}(v - {start}u, lane); }} {els}"
                    ));
                    store.push_str(&format!(
                        "{cond}{{ st_y{j}((v - {start}u) / EPW, x0, x1); }} {els}"
                    ));
                    start = end;
                }
                (compute, "rd(a0)".to_string(), store)
            }
            EpilogueCode::GeluMul { gate } => (
                format!("p0 = dot{}(v, lane); p1 = dot{}(v, lane);", gate, 1 - gate),
                "rd(rd(gelu_tanh(rd(a0))) * rd(a1))".to_string(),
                "st_y(v / EPW, x0, x1);".to_string(),
            ),
            EpilogueCode::GeluOther { .. } => {
                one("rd(rd(gelu_tanh(rd(a0))) * ld_other(other_off + v))".to_string())
            }
            // As the Div, Tanh (ew.wgsl's clamped tanh_) and Mul nodes.
            EpilogueCode::Softcap { c } => {
                let c = wgsl_f32(f32::from_bits(c));
                one(format!("rd(rd(tanh_(rd(rd(a0) / {c}))) * {c})"))
            }
            EpilogueCode::Scale { c } => {
                let c = wgsl_f32(f32::from_bits(c));
                one(format!("rd(rd(a0) * {c})"))
            }
        }
    }
}

impl KernelSpec for FusedGemvSpec<'_> {
    const NAME: &'static str = "fused_gemv";
    const WGSL: &'static [&'static str] = &[
        FUSED_GEMV,
        REDUCE_TREE,
        REDUCE_SHUFFLE,
        RESIDUAL_PROLOGUE,
        STORE_H,
        NORM_PROLOGUE,
        STAGE_ROW,
        STAGE_PAD,
        crate::ops::quant::NIBBLES_WGSL,
    ];

    fn build(&self, f: &Features) -> Kernel {
        let nb = self.nb();
        let kern = Kernel::new(Self::NAME, FUSED_GEMV)
            .params::<FusedGemvParams>()
            .workgroup(WG)
            .wg_reduce(f.subgroups);
        let kern = self.declare(kern);
        let xl = x_loaders(self.staged, self.k, self.f16);
        let (compute, value, store) = self.epilogue();
        kern.u32("K", self.k as u32)
            .u32("NB", nb as u32)
            .u32("BLOCK", self.block as u32)
            .u32("ZROW", nb.div_ceil(2) as u32)
            .u32("NV", self.nv() as u32)
            .u32("TPC", self.tpc)
            .u32("REPS", self.reps)
            .u32("EPW", if self.f16 { 2 } else { 1 })
            .code("RD", rd_code(self.f16))
            .u32(
                "XS_LEN",
                if self.staged {
                    (nb * self.block / 4) as u32
                } else {
                    2
                },
            )
            .code("XM", xl.xm)
            .code("XE", xl.xe)
            .code("XO", xl.xo)
            .code("XEO", xl.xeo)
            .code("NIBBLES", crate::ops::quant::NIBBLES_WGSL)
            .code("DOTS", &self.dots())
            .code("PROLOGUE", &self.prologue())
            .code("COMPUTE", &compute)
            .code("VALUE", &value)
            .code(
                "ORDER",
                if self.shuffle {
                    "sg_id * sg_size + sg_lane"
                } else {
                    "t"
                },
            )
            .code(
                "REDUCE",
                if self.shuffle {
                    REDUCE_SHUFFLE
                } else {
                    REDUCE_TREE
                },
            )
            .code("STORE", &store)
    }
}

/// What the rows prologue's code depends on.
#[derive(Hash)]
pub(super) struct RowsPrologueSpec {
    /// Row length.
    pub(super) k: usize,
    /// f16 activations (otherwise f32).
    pub(super) f16: bool,
    /// The residual part (its operands `o`, `res`, `g1`; otherwise the row `x`).
    pub(super) residual: Option<ResidualCode>,
    /// The norm part's epsilon (`f32::to_bits`; its scale `g2`).
    pub(super) norm_eps: Option<u32>,
    /// The norm part's scale's storage.
    pub(super) g2: Storage,
    /// h is stored (output `h`).
    pub(super) h: bool,
    /// The normalised row is stored (output `y`).
    pub(super) y: bool,
}

impl RowsPrologueSpec {
    /// The kernel's BODY.
    fn body(&self) -> String {
        let mut body = String::new();
        match self.residual {
            Some(r) => {
                // One pass of substitution, as `format!` did: no placeholder's value is read
                // again.
                body.push_str(
                    &ROWS_RESIDUAL
                        .replace("{eps}", &wgsl_f32(f32::from_bits(r.eps)))
                        .replace("{h0}", &r.h("base + ", "l"))
                        .replace("{h1}", &r.h("base + ", "l1")),
                );
            }
            None => body.push_str(ROWS_ROW),
        }
        if let Some(eps) = self.norm_eps {
            // The norm reads back the h words this invocation stored, or, for an f16 skip norm
            // (which normalises the sum before it is rounded), computes h again (in f32 the
            // stored h is that sum); else the row x.
            let src = |l: &str| match self.residual {
                Some(r) if r.skip && self.f16 => r.h("base + ", l),
                Some(_) => format!("ld_h(base + {l})"),
                None => format!("ld_x(base + {l})"),
            };
            body.push_str(
                &ROWS_NORM
                    .replace("{eps}", &wgsl_f32(f32::from_bits(eps)))
                    .replace("{x0}", &src("l"))
                    .replace("{x1}", &src("l1")),
            );
        }
        body
    }
}

impl KernelSpec for RowsPrologueSpec {
    const NAME: &'static str = "rows_prologue";
    const WGSL: &'static [&'static str] = &[ROWS_PROLOGUE, ROWS_RESIDUAL, ROWS_ROW, ROWS_NORM];

    fn build(&self, f: &Features) -> Kernel {
        let st = if self.f16 { Storage::F16 } else { Storage::F32 };
        let mut k = Kernel::new(Self::NAME, ROWS_PROLOGUE)
            .params::<RowsPrologueParams>()
            .workgroup(WG)
            .wg_reduce(f.subgroups);
        k = match self.residual {
            Some(r) => k.input("o", st).input("res", st).input("g1", r.g1),
            None => k.input("x", st),
        };
        if self.norm_eps.is_some() {
            k = k.input("g2", self.g2);
        }
        if self.h {
            k = k.output("h", st);
        }
        if self.y {
            k = k.output("y", st);
        }
        k.u32("K", self.k as u32)
            .u32("EPW", if self.f16 { 2 } else { 1 })
            .code("RD", rd_code(self.f16))
            .code("BODY", &self.body())
    }
}

/// The body of the fused kernels' `rd()`: rounding to f16 for f16 activations (the unfused
/// graph stores every result as f16), the identity for f32.
pub(super) fn rd_code(f16: bool) -> &'static str {
    if f16 {
        "return round_f16(x);"
    } else {
        "return x;"
    }
}

/// WGSL `dot{j}(n, lane) -> array<f32, REPS>`: lane `lane`'s share (blocks lane, lane + TPC, ..)
/// of the dot products of weight `j`'s columns n, n + COLS, .. (REPS of them, clamped to the
/// dispatch's last column) with the staged row, written out for distinct accumulators so that each
/// load of the row serves every column. `wide`: the bits are read four words per load
/// (`ldv_qw{j}`, whole quant blocks of 16 bytes), otherwise a word per load.
pub(super) fn gemv_dot(j: usize, reps: u32, wide: bool) -> String {
    let rs = 0..reps;
    let each = |f: &dyn Fn(u32) -> String| rs.clone().map(f).collect::<Vec<_>>().join("\n");
    let body = if wide {
        let words = (0..4)
            .map(|c| {
                format!(
                    "{{
                let eo = xeo(i0 + {c}u);
                let e = eo[0];
                let o = eo[1];
                {}
            }}",
                    each(&|r| format!(
                        "s{r} = s{r} + dot(nib_lo(q{r}[{c}]), e) + dot(nib_hi(q{r}[{c}]), o);"
                    ))
                )
            })
            .collect::<Vec<_>>()
            .join("\n            ");
        format!(
            "for (var u = 0u; u < BLOB_WORDS / 4u; u = u + 1u) {{
            let i0 = b * BLOB_WORDS + 4u * u;
            {loads}
            {words}
        }}",
            loads = each(&|r| format!("let q{r} = ldv_qw{j}((wb{r} >> 2u) + u);")),
        )
    } else {
        format!(
            "for (var w = 0u; w < BLOB_WORDS; w = w + 1u) {{
            let i = b * BLOB_WORDS + w;
            let eo = xeo(i);
            let e = eo[0];
            let o = eo[1];
            {}
        }}",
            each(&|r| format!(
                "let q{r} = ldw_qw{j}(wb{r} + w); s{r} = s{r} + dot(nib_lo(q{r}), e) + dot(nib_hi(q{r}), o);"
            ))
        )
    };
    format!(
        "fn dot{j}(n: u32, lane: u32) -> array<f32, REPS> {{
    {cols}
    {accs}
    for (var b = lane; b < NB; b = b + TPC) {{
        {wbs}
        {body}
        let bs = bsum[b];
        {acc}
    }}
    return array<f32, REPS>({ret});
}}
",
        cols = each(&|r| format!("let n{r} = min(n + {r}u * COLS, prm.end_col - 1u);")),
        accs = each(&|r| format!("var acc{r} = 0.0;")),
        wbs = each(&|r| format!(
            "let wb{r} = ((n{r} - prm.first_col) * NB + b) * BLOB_WORDS; var s{r} = 0.0;"
        )),
        acc = each(&|r| format!(
            "acc{r} = acc{r} + ld_sc{j}(n{r} * NB + b) * (s{r} - zero{j}(n{r}, b) * bs);"
        )),
        ret = rs
            .clone()
            .map(|r| format!("acc{r}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// WGSL `dot{j}(n, lane) -> array<f32, REPS>` for float weight `j` (`[K, N]`, `N` = `n`,
/// element `i` read by the expression `ld`): as [`gemv_dot`], lane `lane`'s share (row words
/// lane, lane + TPC, .. of 8 elements each) of the dot products of columns n, n + COLS, .. with
/// the staged row. Elements past `K` (the staging's padding) count as zero.
pub(super) fn float_dot(j: usize, reps: u32, n: usize, ld: &str) -> String {
    let each = |f: &dyn Fn(u32) -> String| (0..reps).map(f).collect::<Vec<_>>().join("\n        ");
    let w = |r: u32, o: [u32; 4]| {
        format!(
            "vec4<f32>(wf{j}(k0 + {}u, n{r}), wf{j}(k0 + {}u, n{r}), wf{j}(k0 + {}u, n{r}), wf{j}(k0 + {}u, n{r}))",
            o[0], o[1], o[2], o[3]
        )
    };
    format!(
        "fn wf{j}(k: u32, c: u32) -> f32 {{
    let i = min(k, K - 1u) * {n}u + c;
    return select(0.0, {ld}, k < K);
}}
fn dot{j}(n: u32, lane: u32) -> array<f32, REPS> {{
    {cols}
    {accs}
    for (var b = lane; b < NB; b = b + TPC) {{
        let eo = xeo(b);
        let k0 = 8u * b;
        {acc}
    }}
    return array<f32, REPS>({ret});
}}
",
        cols = each(&|r| format!("let n{r} = min(n + {r}u * COLS, prm.end_col - 1u);")),
        accs = each(&|r| format!("var acc{r} = 0.0;")),
        acc = each(&|r| format!(
            "acc{r} = acc{r} + dot({}, eo[0]) + dot({}, eo[1]);",
            w(r, [0, 2, 4, 6]),
            w(r, [1, 3, 5, 7])
        )),
        ret = (0..reps)
            .map(|r| format!("acc{r}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// WGSL for result `j` stored in a range of one output binding `y` (from `Ctx::alloc_pack`)
/// starting at word `at` (a WGSL expression): `st_y{j}(w, v0, v1)` stores word `w` of its range,
/// and `EPW_y{j}` is `EPW_y`.
pub(super) fn packed_store(j: usize, at: &str) -> String {
    format!(
        "const EPW_y{j}: u32 = EPW_y;\nfn st_y{j}(w: u32, v0: f32, v1: f32) {{ st_y(w + {at}, v0, v1); }}\n"
    )
}

/// The fused GEMV's residual prologue `h = res + RMSNorm(o) [* scalar]` (`r`) into the staged
/// row (`residual_prologue.wgsl`); `h_out`: the first workgroup also stores h (`store_h.wgsl`,
/// rounding it as the unfused node stores it).
fn residual_prologue(r: &ResidualCode, h_out: bool) -> String {
    let store = if h_out { STORE_H } else { "" };
    // One pass of substitution, as `format!` did: no placeholder's value is read again.
    RESIDUAL_PROLOGUE
        .replace("{eps}", &wgsl_f32(f32::from_bits(r.eps)))
        .replace("{h}", &r.h("", "l"))
        .replace("{store}", store)
}

/// The fused GEMV's loaders of the row (`xm`, `xe`, `xo`, `xeo` in `fused_gemv.wgsl`): from the
/// staged copy in workgroup memory (`staged`), else from memory (`k` the row length, `f16` the
/// activation type).
struct XLoaders {
    xm: &'static str,
    xe: &'static str,
    xo: &'static str,
    xeo: &'static str,
}

fn x_loaders(staged: bool, k: usize, f16: bool) -> XLoaders {
    XLoaders {
        xm: if staged {
            "return 0.0;"
        } else if k.is_multiple_of(8) {
            "return ld_x(k);"
        } else {
            "return select(0.0, ld_x(min(k, K - 1u)), k < K);"
        },
        xe: if staged {
            "return xs[2u * i];"
        } else {
            "let k = 8u * i; return vec4<f32>(xm(k), xm(k + 2u), xm(k + 4u), xm(k + 6u));"
        },
        xo: if staged {
            "return xs[2u * i + 1u];"
        } else {
            "let k = 8u * i + 1u; return vec4<f32>(xm(k), xm(k + 2u), xm(k + 4u), xm(k + 6u));"
        },
        xeo: if staged {
            "return mat2x4<f32>(xs[2u * i], xs[2u * i + 1u]);"
        } else if f16 && k.is_multiple_of(8) {
            // Four words hold the eight elements: each unpacked once for both halves.
            "let a = unpack2x16float(ldw_x(4u * i));
    let b = unpack2x16float(ldw_x(4u * i + 1u));
    let c = unpack2x16float(ldw_x(4u * i + 2u));
    let d = unpack2x16float(ldw_x(4u * i + 3u));
    return mat2x4<f32>(vec4<f32>(a.x, b.x, c.x, d.x), vec4<f32>(a.y, b.y, c.y, d.y));"
        } else {
            "return mat2x4<f32>(xe(i), xo(i));"
        },
    }
}

/// The loaders of weight `j`'s bits (`ldw_qw{j}`, with `wide` also `ldv_qw{j}`), scales
/// (`ld_sc{j}`, of storage `scales`) and zero points (`ldi_zp{j}`, with `zp`) when it is packed
/// with the others in one binding `wts`: gpu.rs's loaders of that binding, at the weight's
/// offsets `at`.
fn packed_loaders(j: usize, at: PackedAt, scales: Storage, zp: bool, wide: bool) -> String {
    let mut code = String::new();
    let sc = if scales == Storage::F16 {
        format!(
            "let k = i + {}u; return unpack2x16float(ldw_wts(k >> 1u))[k & 1u];",
            at.scales / 2
        )
    } else {
        format!("return bitcast<f32>(ldw_wts(i + {}u));", at.scales / 4)
    };
    code.push_str(&format!(
        "fn ldw_qw{j}(w: u32) -> u32 {{ return ldw_wts(w + {}u); }}
fn ld_sc{j}(i: u32) -> f32 {{ {sc} }}
",
        at.bits / 4,
    ));
    if wide {
        code.push_str(&format!(
            "fn ldv_qw{j}(v: u32) -> vec4<u32> {{ return ldv_wts(v + {}u); }}\n",
            at.bits / 16,
        ));
    }
    if zp {
        code.push_str(&format!(
            "fn ldi_zp{j}(i: u32) -> i32 {{ let k = i + {}u; return i32((ldw_wts(k >> 2u) >> ((k & 3u) * 8u)) & 0xffu); }}\n",
            at.zp
        ));
    }
    code
}
