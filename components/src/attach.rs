//! Images the user attaches to a message (pasted, dropped or picked): what is accepted, and
//! reading a `File` into an [`ImagePart`].
//!
//! The type is read from the file's first bytes, never from its name or the type the page (or
//! the clipboard) claims: a file that is not a PNG, JPEG or WebP image is refused with a
//! message that says what is accepted.

use gg_agent::ImagePart;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

/// Most images one message may carry.
pub const MAX_IMAGES: usize = ImagePart::MAX_PER_MESSAGE;

/// The media types accepted (the `accept` list of the file picker).
pub const ACCEPT: &str = ImagePart::ACCEPTED;

/// Whether `mime` (a clipboard file's declared type) could be an image: used only to decide
/// whether a paste is about files at all; the bytes decide what is accepted
/// ([`ImagePart::from_user`]).
pub fn looks_like_image(mime: &str) -> bool {
    mime.starts_with("image/")
}

/// Reads a `File` (from a paste, a drop or the picker) into an [`ImagePart`].
pub async fn read_file(file: web_sys::File) -> Result<ImagePart, String> {
    let name = file.name();
    if file.size() > ImagePart::MAX_BYTES as f64 {
        // Refused before reading it into memory.
        return Err(ImagePart::too_large(&name, file.size()));
    }
    let buffer = JsFuture::from(file.array_buffer())
        .await
        .map_err(|_| format!("{name} could not be read"))?;
    let buffer: js_sys::ArrayBuffer = buffer
        .dyn_into()
        .map_err(|_| format!("{name} could not be read"))?;
    ImagePart::from_user(&name, js_sys::Uint8Array::new(&buffer).to_vec())
}

/// The files of a `FileList`, in order.
pub fn files_of(list: Option<web_sys::FileList>) -> Vec<web_sys::File> {
    let Some(list) = list else {
        return Vec::new();
    };
    (0..list.length()).filter_map(|i| list.get(i)).collect()
}
