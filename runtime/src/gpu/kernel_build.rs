//! WGSL assembly: a kernel's header (bindings, accessors, parameter block), body and mapped
//! `main`.

use super::Storage;
use super::kernel::Kernel;
use crate::error::{Error, Result};

impl Kernel {
    pub(super) fn source(&self) -> Result<String> {
        // A runtime bitcast for NaN/infinity constants (see `wgsl_f32`), and `x` rounded to f16
        // as a stored f16 result is (for fused kernels standing for f16 nodes' outputs).
        let mut s = String::from(
            "fn f32_bits(b: u32) -> f32 { return bitcast<f32>(b); }\n\
             fn round_f16(x: f32) -> f32 { return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0))).x; }\n",
        );
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
        let Some((_, decl)) = &self.block else {
            return Err(Error::Gpu(format!(
                "kernel {}: no parameters declared (Kernel::params)",
                self.name
            )));
        };
        s.push_str(decl);
        s.push_str(&format!(
            "@group(0) @binding({}) var<uniform> prm: Params;\nconst WG: u32 = {}u;\n",
            self.bindings.len(),
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
    let n = prm.n;
    let i0 = w * EPW_{out};
    if (i0 >= n) {{ return; }}
    let v0 = {compute}(i0);
    var v1 = {zero};
    if (EPW_{out} == 2u && i0 + 1u < n) {{ v1 = {compute}(i0 + 1u); }}
    {stores}
}}
",
                wg = self.workgroup,
            ));
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::wgsl_f32;

    crate::gpu_params! {
        /// A test block.
        struct P {
            n: u32,
            scale: f32,
        }
    }

    #[test]
    fn parameters_are_a_typed_uniform_block_and_required() {
        let src = Kernel::new("t", "fn compute(i: u32) -> f32 { return prm.scale; }")
            .params::<P>()
            .input("x", Storage::F32)
            .output("y", Storage::F32)
            .mapped("y")
            .source()
            .expect("source");
        assert!(
            src.contains("struct Params {\n    n: u32,\n    scale: f32,\n}"),
            "{src}"
        );
        assert!(
            src.contains("@group(0) @binding(2) var<uniform> prm: Params;"),
            "{src}"
        );
        assert!(src.contains("let n = prm.n;"), "{src}");
        let none = Kernel::new("t", "fn compute(i: u32) -> f32 { return 0.0; }")
            .output("y", Storage::F32)
            .mapped("y")
            .source();
        assert!(none.is_err());
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
            .params::<P>()
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
