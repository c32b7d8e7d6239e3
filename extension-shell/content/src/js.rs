//! Small helpers over `js_sys::Reflect`: reading message fields, building answers, calling
//! methods that web-sys does not bind (or binds with `instanceof` checks, which fail for nodes
//! of same-origin iframes: they belong to another realm).

use alloc::boxed::Box;
use alloc::string::String;
use core::cell::OnceCell;
use js_sys::{Array, Function, Object, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{CssStyleDeclaration, Element};

#[wasm_bindgen]
extern "C" {
    // Bindings that take and give JS values, so a walk over every element of a page passes no
    // string through the heap: `getPropertyValue`/`getAttribute` with an interned name, and
    // results compared in JS (`===`) with interned constants.
    type Style;
    #[wasm_bindgen(method, js_name = getPropertyValue)]
    fn property_value(this: &Style, name: &JsValue) -> JsValue;
    type Elem;
    #[wasm_bindgen(method, js_name = getAttribute)]
    fn attribute_value(this: &Elem, name: &JsValue) -> JsValue;
    #[wasm_bindgen(method, getter, js_name = localName)]
    fn local_name_value(this: &Elem) -> JsValue;
}

/// JS strings of the constant names the tools use, each made once. Without this every call
/// with a name (`getPropertyValue("display")` on each of 100,000 elements) decodes the name
/// from the wasm heap into a new JS string: most of a page walk's time and garbage. An
/// open-addressing table keyed by the constant's address (each literal is one entry), never
/// emptied, so its values live as long as the module.
struct Interned([OnceCell<(usize, usize, JsValue)>; SLOTS]);
const SLOTS: usize = 256;
// SAFETY: the content script runs on the page's main thread only (wasm32v1-none has no
// threads); the values never leave it.
unsafe impl Sync for Interned {}
static INTERNED: Interned = Interned([const { OnceCell::new() }; SLOTS]);

/// The JS string of a constant, made on first use.
pub fn intern(s: &'static str) -> &'static JsValue {
    let key = (s.as_ptr() as usize, s.len());
    let start = (key.0 as u32 ^ key.1 as u32).wrapping_mul(0x9E37_79B9) >> 24;
    for i in 0..SLOTS {
        let slot = &INTERNED.0[(start as usize + i) % SLOTS];
        let (p, l, v) = slot.get_or_init(|| (key.0, key.1, JsValue::from_str(s)));
        if (*p, *l) == key {
            return v;
        }
    }
    // More constants than slots (the tools have far fewer): one kept value per call.
    Box::leak(Box::new(JsValue::from_str(s)))
}

/// A computed style's property (`getPropertyValue`), as a JS value.
pub fn style_value(style: &CssStyleDeclaration, name: &'static str) -> JsValue {
    style.unchecked_ref::<Style>().property_value(intern(name))
}

/// `style.getPropertyValue(name) === value`, compared in JS.
pub fn style_is(style: &CssStyleDeclaration, name: &'static str, value: &'static str) -> bool {
    style_value(style, name) == *intern(value)
}

/// `el.getAttribute(name)` with an interned or page-given name.
pub fn attribute(el: &Element, name: &JsValue) -> Option<String> {
    el.unchecked_ref::<Elem>().attribute_value(name).as_string()
}

/// `el.getAttribute(name) === value`, compared in JS.
pub fn attribute_is(el: &Element, name: &'static str, value: &'static str) -> bool {
    el.unchecked_ref::<Elem>().attribute_value(intern(name)) == *intern(value)
}

/// `el.localName` is `name`, compared in JS.
pub fn local_name_is(el: &Element, name: &'static str) -> bool {
    el.unchecked_ref::<Elem>().local_name_value() == *intern(name)
}

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

/// Calls `target[method](...args)` (through `Reflect.apply`: a page's replaced
/// `Function.prototype.apply` changes nothing); `Err` if it is not a function or throws.
pub fn call(target: &JsValue, method: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let f: Function = get(target, method)
        .dyn_into()
        .map_err(|_| JsValue::from_str(method))?;
    Reflect::apply(&f, target, &list(args))
}

/// The arguments as an array, set by index: no `Array.prototype.push`, which a page may
/// replace (the `embedded` build runs in the page's realm).
fn list(args: &[JsValue]) -> Array {
    let list = Array::new_with_length(args.len() as u32);
    for (i, a) in args.iter().enumerate() {
        list.set(i as u32, a.clone());
    }
    list
}

/// `new globalThis[ctor](...args)`.
pub fn construct(ctor: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let f: Function = get(&js_sys::global(), ctor)
        .dyn_into()
        .map_err(|_| JsValue::from_str(ctor))?;
    Reflect::construct(&f, &list(args))
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
