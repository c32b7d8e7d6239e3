//! `type_text`: typing into a text field, text area or editable element with the key and input
//! events a user's typing fires, picking a `<select>` option, and pressing Enter to submit.

use alloc::format;
use alloc::string::{String, ToString};
use wasm_bindgen::{JsCast, JsValue};
use web_sys::Element;

use super::dom_act::{check_usable, dispatch, focus, scroll_into_view};
use super::{Target, ToolErr};
use crate::dom;
use crate::js::{self, Obj};
use crate::text::clip;

/// `key` and `code` of a typed character.
fn key_init(c: char) -> Obj {
    let (key, code, key_code): (String, String, f64) = match c {
        '\n' => ("Enter".into(), "Enter".into(), 13.0),
        ' ' => (" ".into(), "Space".into(), 32.0),
        'a'..='z' | 'A'..='Z' => (
            c.to_string(),
            format!("Key{}", c.to_ascii_uppercase()),
            f64::from(c.to_ascii_uppercase() as u32),
        ),
        '0'..='9' => (c.to_string(), format!("Digit{c}"), f64::from(c as u32)),
        _ => (c.to_string(), String::new(), 0.0),
    };
    Obj::new()
        .b("bubbles", true)
        .b("cancelable", true)
        .b("composed", true)
        .s("key", &key)
        .s("code", &code)
        .n("keyCode", key_code)
        .n("which", key_code)
        .n(
            "charCode",
            if c == '\n' { 13.0 } else { f64::from(c as u32) },
        )
}

fn input_init(input_type: &str, data: Option<&str>, cancelable: bool) -> Obj {
    Obj::new()
        .b("bubbles", true)
        .b("cancelable", cancelable)
        .b("composed", true)
        .s("inputType", input_type)
        .opt("data", data)
}

/// The value setter of `HTMLInputElement.prototype` (or of the text area/select prototype):
/// frameworks such as React install their own `value` property on the element, and only the
/// prototype's setter changes the value behind their back so their change tracking sees it.
fn native_set_value(el: &Element, value: &str) -> Result<(), JsValue> {
    let ctor = match dom::tag(el).as_str() {
        "textarea" => "HTMLTextAreaElement",
        "select" => "HTMLSelectElement",
        _ => "HTMLInputElement",
    };
    let proto = js::get(&js::get(&js_sys::global(), ctor), "prototype");
    let descriptor = js_sys::Reflect::get_own_property_descriptor(
        proto.unchecked_ref::<js_sys::Object>(),
        &"value".into(),
    )?;
    let setter: js_sys::Function = js::get(&descriptor, "set").dyn_into()?;
    setter.call1(el, &JsValue::from_str(value))?;
    Ok(())
}

fn current_value(el: &Element) -> String {
    js::get_str(el, "value").unwrap_or_default()
}

/// Types into an `<input>` or `<textarea>` one character at a time (key events, beforeinput,
/// the native setter, input), then fires `change`. Never reads a password field's value.
fn type_into_field(
    el: &Element,
    text: &str,
    clear: bool,
    per_char: bool,
) -> Result<usize, ToolErr> {
    let password = dom::is_password(el);
    let set = |v: &str| {
        native_set_value(el, v).map_err(|_| ToolErr::failed("the field did not accept the text"))
    };
    let mut typed = String::new();
    if clear {
        let empty = password || !current_value(el).is_empty();
        if empty
            && dispatch(
                el,
                "InputEvent",
                "beforeinput",
                &input_init("deleteContent", None, true),
            )
        {
            set("")?;
            dispatch(
                el,
                "InputEvent",
                "input",
                &input_init("deleteContent", None, false),
            );
        }
    }
    let multiline = dom::tag(el) == "textarea";
    let mut count = 0usize;
    if !per_char {
        let base = if clear {
            String::new()
        } else {
            current_value(el)
        };
        if dispatch(
            el,
            "InputEvent",
            "beforeinput",
            &input_init("insertText", Some(text), true),
        ) {
            set(&format!("{base}{text}"))?;
            dispatch(
                el,
                "InputEvent",
                "input",
                &input_init("insertText", Some(text), false),
            );
            count = text.chars().count();
        }
    } else {
        for c in text.chars() {
            if c == '\r' || (c == '\n' && !multiline) {
                continue;
            }
            let mut buf = [0u8; 4];
            let ch: &str = c.encode_utf8(&mut buf);
            let keys = key_init(c);
            let mut go = dispatch(el, "KeyboardEvent", "keydown", &keys);
            if go && c != '\n' {
                go = dispatch(el, "KeyboardEvent", "keypress", &keys);
            }
            let (kind, data) = if c == '\n' {
                ("insertLineBreak", None)
            } else {
                ("insertText", Some(ch))
            };
            if go
                && dispatch(
                    el,
                    "InputEvent",
                    "beforeinput",
                    &input_init(kind, data, true),
                )
            {
                if password {
                    if clear {
                        typed.push(c);
                        set(&typed)?;
                    } else {
                        // Append without reading the password: setRangeText clamps the
                        // position to the end of the value.
                        let args = [
                            ch.into(),
                            JsValue::from_f64(1e9),
                            JsValue::from_f64(1e9),
                            "end".into(),
                        ];
                        js::call(el, "setRangeText", &args)
                            .map_err(|_| ToolErr::failed("the field did not accept the text"))?;
                    }
                } else {
                    let now = current_value(el);
                    set(&format!("{now}{ch}"))?;
                }
                dispatch(el, "InputEvent", "input", &input_init(kind, data, false));
                count += 1;
            }
            dispatch(el, "KeyboardEvent", "keyup", &keys);
        }
    }
    dispatch(el, "Event", "change", &Obj::new().b("bubbles", true));
    Ok(count)
}

/// Types into a contenteditable element: `insertText` through the editing commands (the events
/// editors listen to), or DOM insertion with input events where that is refused.
fn type_into_editable(el: &Element, text: &str, clear: bool) -> Result<usize, ToolErr> {
    let doc = el
        .owner_document()
        .ok_or_else(|| ToolErr::failed("the element has no document"))?;
    let selection = js::call(&doc, "getSelection", &[]).unwrap_or(JsValue::NULL);
    if !selection.is_null() {
        if clear {
            let _ = js::call(&selection, "selectAllChildren", &[el.into()]);
        } else {
            let _ = js::call(&selection, "selectAllChildren", &[el.into()]);
            let _ = js::call(&selection, "collapseToEnd", &[]);
        }
    }
    let before = el.text_content().unwrap_or_default();
    let done = js::call(
        &doc,
        "execCommand",
        &["insertText".into(), JsValue::FALSE, text.into()],
    )
    .ok()
    .and_then(|v| v.as_bool())
    .unwrap_or(false);
    let after = el.text_content().unwrap_or_default();
    if !done || (after == before && !text.is_empty()) {
        if !dispatch(
            el,
            "InputEvent",
            "beforeinput",
            &input_init("insertText", Some(text), true),
        ) {
            return Ok(0);
        }
        if clear {
            el.set_text_content(Some(text));
        } else {
            let node = doc.create_text_node(text);
            el.append_child(&node)
                .map_err(|_| ToolErr::failed("the element did not accept the text"))?;
        }
        dispatch(
            el,
            "InputEvent",
            "input",
            &input_init("insertText", Some(text), false),
        );
    }
    Ok(text.chars().count())
}

/// Picks the option of a `<select>` whose text or value is `text`.
fn choose_option(target: &Target, el: &Element, text: &str) -> Result<usize, ToolErr> {
    let wanted = crate::text::one_line(text);
    let options = js::get(el, "options");
    let count = js::get_f64(&options, "length").unwrap_or(0.0) as u32;
    for i in 0..count {
        let option = js::get(&options, &format!("{i}"));
        let label = crate::text::one_line(&js::get_str(&option, "text").unwrap_or_default());
        let value = js::get_str(&option, "value").unwrap_or_default();
        if label.eq_ignore_ascii_case(&wanted) || value == text {
            if js::get_true(&option, "disabled") {
                break;
            }
            let _ = js_sys::Reflect::set(
                el,
                &"selectedIndex".into(),
                &JsValue::from_f64(f64::from(i)),
            );
            dispatch(
                el,
                "Event",
                "input",
                &Obj::new().b("bubbles", true).b("composed", true),
            );
            dispatch(el, "Event", "change", &Obj::new().b("bubbles", true));
            return Ok(text.chars().count());
        }
    }
    Err(ToolErr::not_found(format!(
        "{} has no enabled option with that text or value; call snapshot_page or \
         read_page_content to see its options",
        target.subject(el)
    )))
}

/// Presses Enter in the field; when the page does not handle the key itself, submits the form
/// the way a browser does (a click on its default button, or `requestSubmit`).
fn press_enter(el: &Element) -> bool {
    let keys = key_init('\n');
    let down = dispatch(el, "KeyboardEvent", "keydown", &keys);
    let press = down && dispatch(el, "KeyboardEvent", "keypress", &keys);
    let mut submitted = false;
    if press {
        let form = js::get(el, "form");
        if !form.is_null() && !form.is_undefined() {
            let button = crate::pristine::query(
                &form,
                "button:not([type]), button[type=submit i], input[type=submit i], input[type=image i]",
            )
            .ok()
            .flatten();
            match button {
                Some(button) if !dom::is_disabled(&button) => {
                    let init = Obj::new()
                        .b("bubbles", true)
                        .b("cancelable", true)
                        .b("composed", true)
                        .n("detail", 0.0);
                    dispatch(&button, "MouseEvent", "click", &init);
                    submitted = true;
                }
                Some(_) => {}
                None => submitted = js::call(&form, "requestSubmit", &[]).is_ok(),
            }
        }
    }
    dispatch(el, "KeyboardEvent", "keyup", &keys);
    submitted
}

#[inline(never)]
pub(super) fn type_text(
    target: &Target,
    el: &Element,
    text: &str,
    submit: bool,
    clear: bool,
) -> Result<JsValue, ToolErr> {
    check_usable(target, el)?;
    let tag = dom::tag(el);
    let readonly = (matches!(tag.as_str(), "input" | "textarea") && el.has_attribute("readonly"))
        || dom::attr(el, "aria-readonly").as_deref() == Some("true");
    if readonly {
        return Err(ToolErr::not_interactable(format!(
            "{} is read-only; it cannot be typed into",
            target.subject(el)
        )));
    }
    // Judged before typing, while the page's layout is clean: the secret check looks at the
    // field's box, and after the value changes that would force the browser to lay out the
    // page again inside this task (56-68 ms on a page of 100,000 elements).
    let secret = crate::secret::secret_kind(el, None, false).is_some();
    let html: &web_sys::HtmlElement = el.unchecked_ref();
    scroll_into_view(el, "nearest");
    focus(el);
    let typed = match tag.as_str() {
        "input" => {
            let ty = dom::input_type(el);
            let per_char = matches!(
                ty.as_str(),
                "text" | "search" | "email" | "url" | "tel" | "password"
            );
            if !dom::is_text_input_type(&ty) && ty != "range" && ty != "color" {
                return Err(ToolErr::not_interactable(format!(
                    "{} is a {ty} input, not a text field{}",
                    target.subject(el),
                    if matches!(
                        ty.as_str(),
                        "checkbox" | "radio" | "button" | "submit" | "reset" | "image"
                    ) {
                        "; use click_element"
                    } else {
                        ""
                    }
                )));
            }
            type_into_field(el, text, clear, per_char)?
        }
        "textarea" => type_into_field(el, text, clear, true)?,
        "select" => choose_option(target, el, text)?,
        _ if html.is_content_editable() => type_into_editable(el, text, clear)?,
        _ => {
            return Err(ToolErr::not_interactable(format!(
                "{} is not a text field, text area or editable element; call snapshot_page and \
                 pick a textbox",
                target.subject(el)
            )));
        }
    };
    let submitted = submit && press_enter(el);
    let mut out = Obj::new()
        .s("typed_into", &dom::describe(el))
        .n("typed_chars", typed as f64);
    // The value is shown back, except a secret field's (password, code, card, hidden).
    if !secret {
        let value = if matches!(tag.as_str(), "input" | "textarea" | "select") {
            current_value(el)
        } else {
            el.text_content().unwrap_or_default()
        };
        out = out.s("value_now", &clip(&value, 300));
    }
    if submit {
        out = out.b("submitted", submitted);
        if !submitted {
            out = out.s(
                "note",
                "Enter was pressed; there was no form to submit (the page may still have \
                 reacted to the key)",
            );
        }
    }
    Ok(out.js())
}
