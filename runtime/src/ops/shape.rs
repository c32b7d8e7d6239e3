//! Shape ops, folded on the host: Shape, Size, Reshape, Unsqueeze, Squeeze, Flatten, Identity,
//! Constant, ConstantOfShape, Range. Reshapes of GPU tensors share the buffer (no copy).

use super::{Attrs, Op, Registry, axis, host_in, opt_host, req};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, Value};
use crate::tensor::{DType, HostTensor, numel};

fn reshape_value(v: &Value, shape: Vec<usize>) -> Result<Value> {
    if numel(&shape) != v.numel() {
        return Err(op_err(format!(
            "cannot reshape {:?} to {shape:?}",
            v.shape()
        )));
    }
    Ok(match v {
        Value::Host(h) => Value::Host(h.reshaped(shape)),
        Value::Gpu(g) => Value::Gpu(g.reshaped(shape)),
    })
}

struct Shape {
    start: i64,
    end: Option<i64>,
}

impl Op for Shape {
    fn run(&self, _cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let s: Vec<i64> = req(inputs, 0)?.shape().iter().map(|&d| d as i64).collect();
        let r = s.len() as i64;
        let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
        let (a, b) = (clampi(self.start), clampi(self.end.unwrap_or(r)));
        let v = if a < b { s[a..b].to_vec() } else { vec![] };
        Ok(vec![Value::Host(HostTensor::from_i64(vec![v.len()], &v))])
    }
}

struct Size;
impl Op for Size {
    fn run(&self, _cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        Ok(vec![Value::Host(HostTensor::from_i64(
            vec![],
            &[req(inputs, 0)?.numel() as i64],
        ))])
    }
}

struct Reshape {
    allowzero: bool,
}

impl Op for Reshape {
    fn host_inputs(&self) -> &[usize] {
        &[1]
    }
    fn run(&self, _cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let x = req(inputs, 0)?;
        let want = host_in(inputs, 1)?.to_i64();
        let mut shape = Vec::with_capacity(want.len());
        let mut infer = None;
        for (i, &d) in want.iter().enumerate() {
            match d {
                0 if !self.allowzero => shape.push(
                    *x.shape()
                        .get(i)
                        .ok_or_else(|| op_err("0 in shape beyond input rank"))?,
                ),
                -1 if infer.is_none() => {
                    infer = Some(i);
                    shape.push(1);
                }
                d if d >= 0 => shape.push(d as usize),
                d => return Err(op_err(format!("bad dimension {d} in shape {want:?}"))),
            }
        }
        if let Some(i) = infer {
            let known = numel(&shape);
            if known == 0 || x.numel() % known != 0 {
                return Err(op_err(format!(
                    "cannot reshape {:?} to {want:?}",
                    x.shape()
                )));
            }
            shape[i] = x.numel() / known;
        }
        Ok(vec![reshape_value(x, shape)?])
    }
}

struct Unsqueeze {
    axes: Option<Vec<i64>>,
}

impl Op for Unsqueeze {
    fn host_inputs(&self) -> &[usize] {
        &[1]
    }
    fn run(&self, _cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let x = req(inputs, 0)?;
        let axes = match &self.axes {
            Some(a) => a.clone(),
            None => host_in(inputs, 1)?.to_i64(),
        };
        let rank = x.shape().len() + axes.len();
        let mut ax: Vec<usize> = axes.iter().map(|&a| axis(a, rank)).collect::<Result<_>>()?;
        ax.sort_unstable();
        let mut shape = x.shape().to_vec();
        for a in ax {
            shape.insert(a, 1);
        }
        Ok(vec![reshape_value(x, shape)?])
    }
}

struct Squeeze {
    axes: Option<Vec<i64>>,
}

impl Op for Squeeze {
    fn host_inputs(&self) -> &[usize] {
        &[1]
    }
    fn run(&self, _cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let x = req(inputs, 0)?;
        let axes = match &self.axes {
            Some(a) => Some(a.clone()),
            None => opt_host(inputs, 1)?.map(HostTensor::to_i64),
        };
        let r = x.shape().len();
        let drop: Vec<usize> = match axes {
            Some(a) => a.iter().map(|&a| axis(a, r)).collect::<Result<_>>()?,
            None => (0..r).filter(|&d| x.shape()[d] == 1).collect(),
        };
        for &d in &drop {
            if x.shape()[d] != 1 {
                return Err(op_err(format!(
                    "cannot squeeze axis {d} of shape {:?}",
                    x.shape()
                )));
            }
        }
        let shape = x
            .shape()
            .iter()
            .enumerate()
            .filter(|(d, _)| !drop.contains(d))
            .map(|(_, &s)| s)
            .collect();
        Ok(vec![reshape_value(x, shape)?])
    }
}

struct Flatten {
    axis: i64,
}

impl Op for Flatten {
    fn run(&self, _cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let x = req(inputs, 0)?;
        let r = x.shape().len();
        let a = if self.axis < 0 {
            self.axis + r as i64
        } else {
            self.axis
        };
        if a < 0 || a > r as i64 {
            return Err(op_err(format!("axis {} out of range", self.axis)));
        }
        let a = a as usize;
        let shape = vec![numel(&x.shape()[..a]), numel(&x.shape()[a..])];
        Ok(vec![reshape_value(x, shape)?])
    }
}

struct Identity;
impl Op for Identity {
    fn run(&self, _cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        Ok(vec![req(inputs, 0)?.clone()])
    }
}

struct Constant(HostTensor);
impl Op for Constant {
    fn run(&self, _cx: &mut Ctx<'_>, _inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        Ok(vec![Value::Host(self.0.clone())])
    }
}

/// The value of a `Constant` node from its `value`, `value_float(s)` or `value_int(s)`
/// attribute; `None` for the others (sparse and string values are not supported).
pub(crate) fn constant_value(a: &Attrs<'_>) -> Result<Option<HostTensor>> {
    Ok(if let Some(t) = a.t("value")? {
        Some(t)
    } else if a.has("value_float") {
        Some(HostTensor::from_f32(vec![], &[a.f_or("value_float", 0.0)]))
    } else if let Some(v) = a.floats("value_floats") {
        Some(HostTensor::from_f32(vec![v.len()], &v))
    } else if let Some(v) = a.i("value_int") {
        Some(HostTensor::from_i64(vec![], &[v]))
    } else {
        a.ints("value_ints")
            .map(|v| HostTensor::from_i64(vec![v.len()], &v))
    })
}

fn constant(a: &Attrs<'_>) -> Result<Box<dyn Op>> {
    let t = constant_value(a)?.ok_or_else(|| {
        a.err(
            "Constant without a supported value attribute (sparse/string values are not supported)",
        )
    })?;
    Ok(Box::new(Constant(t)))
}

struct ConstantOfShape(HostTensor);
impl Op for ConstantOfShape {
    fn host_inputs(&self) -> &[usize] {
        &[0]
    }
    fn run(&self, _cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let shape: Vec<usize> = host_in(inputs, 0)?
            .to_i64()
            .iter()
            .map(|&d| d.max(0) as usize)
            .collect();
        let n = numel(&shape);
        let mut data = Vec::with_capacity(n * self.0.data.len());
        for _ in 0..n {
            data.extend_from_slice(&self.0.data);
        }
        Ok(vec![Value::Host(HostTensor::new(
            self.0.dtype,
            shape,
            data,
        )?)])
    }
}

struct Range;
impl Op for Range {
    fn host_inputs(&self) -> &[usize] {
        &[0, 1, 2]
    }
    fn run(&self, _cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let (s, l, d) = (
            host_in(inputs, 0)?,
            host_in(inputs, 1)?,
            host_in(inputs, 2)?,
        );
        let dtype = s.dtype;
        if dtype.is_float() {
            let (s, l, d) = (s.to_f64()[0], l.to_f64()[0], d.to_f64()[0]);
            let n = (((l - s) / d).ceil()).max(0.0) as usize;
            // Accumulate in the tensor's precision like the reference (start + i*delta in f32).
            let v: Vec<f64> = (0..n)
                .map(|i| {
                    if dtype == DType::F32 {
                        f64::from(s as f32 + i as f32 * d as f32)
                    } else {
                        s + i as f64 * d
                    }
                })
                .collect();
            return Ok(vec![Value::Host(HostTensor::from_f64_as(
                dtype,
                vec![n],
                &v,
            ))]);
        }
        let (s, l, d) = (s.to_i64()[0], l.to_i64()[0], d.to_i64()[0]);
        if d == 0 {
            return Err(op_err("Range delta is 0"));
        }
        let n = ((l - s) as f64 / d as f64).ceil().max(0.0) as usize;
        let v: Vec<i64> = (0..n as i64).map(|i| s + i * d).collect();
        Ok(vec![Value::Host(HostTensor::from_i64_as(
            dtype,
            vec![n],
            &v,
        ))])
    }
}

/// Registers the family.
pub fn register(r: &mut Registry) {
    r.register("", "Shape", |a| {
        Ok(Box::new(Shape {
            start: a.i_or("start", 0),
            end: a.i("end"),
        }))
    });
    r.register("", "Size", |_| Ok(Box::new(Size)));
    r.register("", "Reshape", |a| {
        Ok(Box::new(Reshape {
            allowzero: a.i_or("allowzero", 0) != 0,
        }))
    });
    r.register("", "Unsqueeze", |a| {
        Ok(Box::new(Unsqueeze {
            axes: if a.opset < 13 {
                Some(a.ints("axes").unwrap_or_default())
            } else {
                None
            },
        }))
    });
    r.register("", "Squeeze", |a| {
        Ok(Box::new(Squeeze {
            axes: if a.opset < 13 { a.ints("axes") } else { None },
        }))
    });
    r.register("", "Flatten", |a| {
        Ok(Box::new(Flatten {
            axis: a.i_or("axis", 1),
        }))
    });
    r.register("", "Identity", |_| Ok(Box::new(Identity)));
    r.register("", "Constant", constant);
    r.register("", "ConstantOfShape", |a| {
        let v = a
            .t("value")?
            .unwrap_or_else(|| HostTensor::from_f32(vec![1], &[0.0]));
        if v.numel() != 1 {
            return Err(a.err("value must have one element"));
        }
        Ok(Box::new(ConstantOfShape(v)))
    });
    r.register("", "Range", |_| Ok(Box::new(Range)));
}
