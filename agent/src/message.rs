//! Chat messages: the conversation the agent keeps and hands to the model.
//!
//! A conversation is a list of [`ChatMessage`]s. Each has a [`Role`] and a list of [`Part`]s (text
//! and images). A model message may also carry the [`ToolCall`]s the model made, and a tool message
//! carries the [`ToolResponse`] that answers one of them. This mirrors the Gemma chat format: the
//! model calls a tool inside its turn, the tool response follows, and the model continues.
//!
//! ```
//! use gg_agent::{ChatMessage, Role, ToolCall};
//! use serde_json::json;
//!
//! let user = ChatMessage::user("What is this page about?");
//! assert_eq!(user.role, Role::User);
//! assert_eq!(user.text(), "What is this page about?");
//!
//! let call = ToolCall::new("get_page_title", serde_json::Map::new());
//! let model = ChatMessage::model_with_calls("", vec![call]);
//! let tool = ChatMessage::tool("get_page_title", json!({"title": "Example"}), Vec::new());
//! assert_eq!(model.tool_calls.len(), 1);
//! assert_eq!(tool.tool_response.as_ref().map(|r| r.name.as_str()), Some("get_page_title"));
//! ```

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The system prompt (instructions for the model). At most one, first.
    System,
    /// The person using the extension.
    User,
    /// The model (Gemma's name for the assistant role).
    Model,
    /// The answer to a tool call, written by the agent loop.
    Tool,
}

/// One piece of a message's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An encoded image (PNG, JPEG, ...).
    Image(ImagePart),
}

/// An encoded image attached to a message (a pasted picture, a screenshot).
///
/// The bytes are serialized as standard base64, so the value travels through JSON messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImagePart {
    /// The media type, e.g. `image/png`.
    pub mime_type: String,
    /// The encoded image file.
    #[serde(with = "crate::base64")]
    pub data: Vec<u8>,
}

impl ImagePart {
    /// A PNG image from its encoded bytes.
    pub fn png(data: Vec<u8>) -> Self {
        Self {
            mime_type: "image/png".to_owned(),
            data,
        }
    }

    /// Most images one user message may carry.
    pub const MAX_PER_MESSAGE: usize = 4;

    /// Largest encoded image accepted from the user, in bytes (8 MiB).
    pub const MAX_BYTES: usize = 8 << 20;

    /// The media types accepted from the user (the file picker's `accept` list).
    pub const ACCEPTED: &'static str = "image/png,image/jpeg,image/webp";

    /// The media type of an encoded image from its signature (`image/png`, `image/jpeg` or
    /// `image/webp`); `None` for anything else, whatever its name or declared type says.
    pub fn sniff(bytes: &[u8]) -> Option<&'static str> {
        if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some("image/png")
        } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some("image/jpeg")
        } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
            Some("image/webp")
        } else {
            None
        }
    }

    /// An image the user attached, from its bytes: the type comes from the signature. The error
    /// names `label` (the file's name) and says what is accepted.
    pub fn from_user(label: &str, data: Vec<u8>) -> Result<Self, String> {
        let label = if label.is_empty() { "the image" } else { label };
        if data.is_empty() {
            return Err(format!("{label} is empty"));
        }
        if data.len() > Self::MAX_BYTES {
            return Err(Self::too_large(label, data.len() as f64));
        }
        let Some(mime_type) = Self::sniff(&data) else {
            return Err(format!(
                "{label} is not a PNG, JPEG or WebP image; only those can be attached"
            ));
        };
        Ok(Self {
            mime_type: mime_type.to_owned(),
            data,
        })
    }

    /// The error for an image of `bytes` bytes, above [`ImagePart::MAX_BYTES`].
    pub fn too_large(label: &str, bytes: f64) -> String {
        format!(
            "{label} is {:.1} MB; images up to {} MB can be attached",
            bytes / 1_048_576.0,
            Self::MAX_BYTES >> 20
        )
    }

    /// Checks the images of a user message that came from another context (the UI): at most
    /// [`ImagePart::MAX_PER_MESSAGE`], each within [`ImagePart::MAX_BYTES`], each really of the
    /// type it declares.
    pub fn check_user_images(images: &[ImagePart]) -> Result<(), String> {
        if images.len() > Self::MAX_PER_MESSAGE {
            return Err(format!(
                "{} images were attached; at most {} can be sent with one message",
                images.len(),
                Self::MAX_PER_MESSAGE
            ));
        }
        for (i, image) in images.iter().enumerate() {
            let label = format!("image {}", i + 1);
            if image.data.len() > Self::MAX_BYTES {
                return Err(Self::too_large(&label, image.data.len() as f64));
            }
            match Self::sniff(&image.data) {
                Some(mime) if mime == image.mime_type => {}
                _ => {
                    return Err(format!(
                        "{label} is not the {} image it claims to be",
                        image.mime_type
                    ));
                }
            }
        }
        Ok(())
    }

    /// The image as a `data:` URL (for showing it in the UI).
    pub fn data_url(&self) -> String {
        format!(
            "data:{};base64,{}",
            self.mime_type,
            crate::base64::encode(&self.data)
        )
    }
}

/// A call of a tool by the model: the tool's name and its arguments (a JSON object).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The tool's name, as in its [`ToolDefinition`](crate::ToolDefinition).
    pub name: String,
    /// The arguments, keyed by parameter name.
    #[serde(default)]
    pub args: Map<String, Value>,
}

impl ToolCall {
    /// A call of `name` with `args`.
    pub fn new(name: impl Into<String>, args: Map<String, Value>) -> Self {
        Self {
            name: name.into(),
            args,
        }
    }

    /// A call from a JSON value; anything but an object gives empty arguments.
    ///
    /// Handy in tests and in backends that parsed the arguments as a JSON value:
    /// `ToolCall::from_value("click_element", json!({"ref": "e3"}))`.
    pub fn from_value(name: impl Into<String>, args: Value) -> Self {
        let args = match args {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        Self::new(name, args)
    }
}

/// The answer to one tool call, as the model will read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResponse {
    /// The name of the tool that was called.
    pub name: String,
    /// The result (or `{"error": ...}`), as JSON.
    pub response: Value,
}

/// One message of the conversation.
///
/// Use the constructors ([`ChatMessage::user`], [`ChatMessage::model_with_calls`],
/// [`ChatMessage::tool`], ...) rather than building the struct by hand: they keep the fields
/// consistent with the role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who wrote it.
    pub role: Role,
    /// Text and images, in order. For a tool message: images the tool returned (a screenshot).
    #[serde(default)]
    pub parts: Vec<Part>,
    /// Calls the model made in this message ([`Role::Model`] only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The tool's answer ([`Role::Tool`] only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_response: Option<ToolResponse>,
    /// The model's thinking before this message ([`Role::Model`] only, with thinking on). Kept
    /// for the chat template to decide: Gemma renders it only for tool-calling model messages
    /// of the current turn and strips it from earlier turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
}

impl ChatMessage {
    fn text_message(role: Role, text: impl Into<String>) -> Self {
        let text = text.into();
        let parts = if text.is_empty() {
            Vec::new()
        } else {
            vec![Part::Text { text }]
        };
        Self {
            role,
            parts,
            tool_calls: Vec::new(),
            tool_response: None,
            thinking: None,
        }
    }

    /// A system prompt.
    pub fn system(text: impl Into<String>) -> Self {
        Self::text_message(Role::System, text)
    }

    /// A user message with text only.
    pub fn user(text: impl Into<String>) -> Self {
        Self::text_message(Role::User, text)
    }

    /// A user message with text and images.
    pub fn user_with_images(text: impl Into<String>, images: Vec<ImagePart>) -> Self {
        let mut message = Self::user(text);
        message.parts.extend(images.into_iter().map(Part::Image));
        message
    }

    /// A model message with text only.
    pub fn model(text: impl Into<String>) -> Self {
        Self::text_message(Role::Model, text)
    }

    /// A model message with (possibly empty) text followed by tool calls.
    pub fn model_with_calls(text: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        let mut message = Self::text_message(Role::Model, text);
        message.tool_calls = tool_calls;
        message
    }

    /// A tool response: the JSON the model reads plus images (e.g. a screenshot).
    pub fn tool(name: impl Into<String>, response: Value, images: Vec<ImagePart>) -> Self {
        Self {
            role: Role::Tool,
            parts: images.into_iter().map(Part::Image).collect(),
            tool_calls: Vec::new(),
            tool_response: Some(ToolResponse {
                name: name.into(),
                response,
            }),
            thinking: None,
        }
    }

    /// Sets the thinking that preceded this model message.
    pub fn with_thinking(mut self, thinking: impl Into<String>) -> Self {
        self.thinking = Some(thinking.into());
        self
    }

    /// All text parts, concatenated.
    pub fn text(&self) -> String {
        self.parts
            .iter()
            .filter_map(|part| match part {
                Part::Text { text } => Some(text.as_str()),
                Part::Image(_) => None,
            })
            .collect()
    }

    /// This message with no parts (the role, calls, response and thinking kept).
    pub fn clone_without_parts(&self) -> Self {
        Self {
            role: self.role,
            parts: Vec::new(),
            tool_calls: self.tool_calls.clone(),
            tool_response: self.tool_response.clone(),
            thinking: self.thinking.clone(),
        }
    }

    /// The images in this message.
    pub fn images(&self) -> impl Iterator<Item = &ImagePart> {
        self.parts.iter().filter_map(|part| match part {
            Part::Image(image) => Some(image),
            Part::Text { .. } => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_round_trip_through_json() {
        let messages = vec![
            ChatMessage::system("be brief"),
            ChatMessage::user_with_images("look", vec![ImagePart::png(vec![137, 80, 78, 71])]),
            ChatMessage::model_with_calls(
                "checking",
                vec![ToolCall::from_value("click_element", json!({"ref": "e3"}))],
            ),
            ChatMessage::tool("click_element", json!({"clicked": true}), Vec::new()),
        ];
        let text = serde_json::to_string(&messages).unwrap();
        let back: Vec<ChatMessage> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, messages);
        let value: Value = serde_json::to_value(&messages[1]).unwrap();
        assert_eq!(value["role"], "user");
        assert_eq!(value["parts"][1]["type"], "image");
        assert_eq!(value["parts"][1]["data"], "iVBORw==");
    }

    #[test]
    fn text_and_images_accessors() {
        let mut message = ChatMessage::user_with_images("a", vec![ImagePart::png(vec![1])]);
        message.parts.push(Part::Text {
            text: "b".to_owned(),
        });
        assert_eq!(message.text(), "ab");
        assert_eq!(message.images().count(), 1);
        assert!(ChatMessage::model("").parts.is_empty());
    }

    #[test]
    fn user_images_are_checked_by_their_bytes() {
        assert_eq!(
            ImagePart::sniff(b"\x89PNG\r\n\x1a\nrest"),
            Some("image/png")
        );
        assert_eq!(
            ImagePart::sniff(&[0xFF, 0xD8, 0xFF, 0xE0]),
            Some("image/jpeg")
        );
        assert_eq!(
            ImagePart::sniff(b"RIFF\x10\0\0\0WEBPVP8 "),
            Some("image/webp")
        );
        assert_eq!(ImagePart::sniff(b"RIFF\x10\0\0\0WAVEfmt "), None);
        assert_eq!(ImagePart::sniff(b"GIF89a"), None);
        assert_eq!(ImagePart::sniff(b"<svg"), None);

        let png = b"\x89PNG\r\n\x1a\n....".to_vec();
        assert_eq!(
            ImagePart::from_user("a.png", png.clone())
                .unwrap()
                .mime_type,
            "image/png"
        );
        // The name does not matter: a JPEG called .png is a JPEG.
        let jpeg = ImagePart::from_user("x.png", vec![0xFF, 0xD8, 0xFF, 1]).unwrap();
        assert_eq!(jpeg.mime_type, "image/jpeg");
        let err = ImagePart::from_user("notes.txt", b"hello".to_vec()).unwrap_err();
        assert!(
            err.contains("notes.txt") && err.contains("PNG, JPEG or WebP"),
            "{err}"
        );
        assert!(
            ImagePart::from_user("", Vec::new())
                .unwrap_err()
                .contains("empty")
        );
        let mut big = png.clone();
        big.resize(ImagePart::MAX_BYTES + 1, 0);
        assert!(
            ImagePart::from_user("big.png", big.clone())
                .unwrap_err()
                .contains("8 MB")
        );

        let ok = ImagePart::png(png);
        assert!(ImagePart::check_user_images(&[ok.clone(), jpeg.clone()]).is_ok());
        assert!(
            ImagePart::check_user_images(&vec![ok.clone(); 5])
                .unwrap_err()
                .contains("at most 4")
        );
        let forged = ImagePart {
            mime_type: "image/png".into(),
            data: b"<svg onload=alert(1)>".to_vec(),
        };
        assert!(
            ImagePart::check_user_images(&[ok.clone(), forged])
                .unwrap_err()
                .contains("image 2")
        );
        let relabelled = ImagePart {
            mime_type: "image/webp".into(),
            data: jpeg.data,
        };
        assert!(ImagePart::check_user_images(&[relabelled]).is_err());
        assert!(ImagePart::check_user_images(&[ImagePart::png(big)]).is_err());
    }

    #[test]
    fn from_value_keeps_objects_only() {
        assert_eq!(ToolCall::from_value("x", json!({"a": 1})).args.len(), 1);
        assert!(ToolCall::from_value("x", json!([1, 2])).args.is_empty());
    }
}
