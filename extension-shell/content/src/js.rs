//! Small helpers over `js_sys::Reflect`: reading message fields, building answers, calling
//! methods that web-sys does not bind (or binds with `instanceof` checks, which fail for nodes
//! of same-origin iframes: they belong to another realm).

use alloc::string::String;
use js_sys::{Array, Function, Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};

/// `target[key]`, `undefined` when it cannot be read.
pub fn get(target: &JsValue, key: &str) -> JsValue {
    Reflect::get(target, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

/// `target[key]` if it is a string.
pub fn get_str(target: &JsValue, key: &str) -> Option<String> {
    get(target, key).as_string()
}

/// `target[key]` if it is a number.
pub fn get_f64(target: &JsValue, key: &str) -> Option<f64> {
    get(target, key).as_f64()
}

/// `target[key]` is `true`.
pub fn get_true(target: &JsValue, key: &str) -> bool {
    get(target, key).as_bool() == Some(true)
}

/// Calls `target[method](...args)`; `Err` if it is not a function or throws.
pub fn call(target: &JsValue, method: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let f: Function = get(target, method)
        .dyn_into()
        .map_err(|_| JsValue::from_str(method))?;
    let list = Array::new();
    for a in args {
        list.push(a);
    }
    f.apply(target, &list)
}

/// `new globalThis[ctor](...args)`.
pub fn construct(ctor: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let f: Function = get(&js_sys::global(), ctor)
        .dyn_into()
        .map_err(|_| JsValue::from_str(ctor))?;
    let list = Array::new();
    for a in args {
        list.push(a);
    }
    Reflect::construct(&f, &list)
}

/// A plain object built field by field.
pub struct Obj(pub Object);

impl Obj {
    pub fn new() -> Self {
        Self(Object::new())
    }
    pub fn v(self, key: &str, value: impl Into<JsValue>) -> Self {
        // Setting a property on a fresh plain object cannot fail.
        let _ = Reflect::set(&self.0, &JsValue::from_str(key), &value.into());
        self
    }
    pub fn s(self, key: &str, value: &str) -> Self {
        self.v(key, JsValue::from_str(value))
    }
    pub fn n(self, key: &str, value: f64) -> Self {
        self.v(key, JsValue::from_f64(value))
    }
    pub fn b(self, key: &str, value: bool) -> Self {
        self.v(key, JsValue::from_bool(value))
    }
    /// A string or `null`.
    pub fn opt(self, key: &str, value: Option<&str>) -> Self {
        match value {
            Some(v) => self.s(key, v),
            None => self.v(key, JsValue::NULL),
        }
    }
    pub fn js(self) -> JsValue {
        self.0.into()
    }
}

impl Default for Obj {
    fn default() -> Self {
        Self::new()
    }
}
