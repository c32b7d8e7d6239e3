//! Prompts with images: each image preprocessed ([`crate::image`]), encoded by the vision
//! encoder (an [`ImageEncoder`]: the GPU encoder session, or in tests ONNX Runtime's features),
//! its `<|image|>` placeholder expanded to its soft tokens ([`gg_gemma::ImageTokens`]), and the
//! features fed with the prompt ([`crate::Generator::with_image_features`]).

use crate::error::{LlmError, Result};
use crate::image::{PreparedImage, preprocess};
use crate::model::GemmaModel;
use crate::stream::{TextOptions, TextStream};
use futures::future::LocalBoxFuture;
use gg_gemma::{ChatMessage, ToolDeclaration};
use gg_runtime::Value;

/// An image given to the model: the file's bytes (PNG, JPEG or WebP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInput {
    /// The encoded image.
    pub bytes: Vec<u8>,
}

/// The vision encoder as a generation uses it: one preprocessed image in, its features
/// `[image.soft_tokens, hidden]` out (host or GPU, float32 or float16).
pub trait ImageEncoder {
    /// Encodes one image.
    fn encode<'a>(&'a self, image: &'a PreparedImage) -> LocalBoxFuture<'a, Result<Value>>;
}

impl GemmaModel {
    /// The hidden size, from the declared shape of the decoder's `inputs_embeds` (or the
    /// embedding's `image_features`), where fixed.
    pub fn hidden_size(&self) -> Option<usize> {
        let fixed = |d: &gg_runtime::model::Dim| match d {
            gg_runtime::model::Dim::Fixed(v) => usize::try_from(*v).ok(),
            _ => None,
        };
        let of = |g: &gg_runtime::model::Graph, name: &str| {
            g.inputs
                .iter()
                .find(|i| i.name == name)
                .and_then(|i| i.dims.as_deref()?.last().and_then(fixed))
        };
        of(&self.decoder.graph, "inputs_embeds").or_else(|| {
            self.embed
                .as_ref()
                .and_then(|e| of(&e.graph, crate::model::IMAGE_FEATURES))
        })
    }

    /// Preprocesses `images` with the model's image config at `max_soft_tokens` per image (one
    /// of [`crate::image::SUPPORTED_SOFT_TOKENS`]).
    pub fn prepare_images(
        &self,
        images: &[ImageInput],
        max_soft_tokens: usize,
    ) -> Result<Vec<PreparedImage>> {
        let cfg = self
            .image_config
            .ok_or_else(|| {
                LlmError::Model(
                    "the model has no image processor config (image_processor.json, preprocessor_config.json or processor_config.json): it takes no images".into(),
                )
            })?
            .with_max_soft_tokens(max_soft_tokens)?;
        images
            .iter()
            .enumerate()
            .map(|(i, img)| {
                preprocess(&img.bytes, &cfg).map_err(|e| match e {
                    LlmError::Options(m) => LlmError::Options(format!("image {}: {m}", i + 1)),
                    other => other,
                })
            })
            .collect()
    }

    /// [`GemmaModel::prompt_ids`] with each image placeholder the template writes (one per
    /// image part, in order) expanded to `<|image>` + `<|image|>`×soft tokens + `<image|>`.
    pub fn prompt_ids_with_images(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDeclaration],
        thinking: bool,
        images: &[PreparedImage],
    ) -> Result<Vec<u32>> {
        self.prompt_ids_with_tool_images(messages, tools, thinking, images, &[])
    }

    /// [`GemmaModel::prompt_ids_with_images`] for a conversation whose tools returned images
    /// too: `tool_images[k]` placeholders go after the k-th tool response
    /// ([`gg_gemma::ImageTokens::splice_tool_images`]; the counts come from
    /// [`gg_gemma::agent::conversation_images`]), and `images` are all the images in the
    /// order the prompt then reads them.
    pub fn prompt_ids_with_tool_images(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDeclaration],
        thinking: bool,
        images: &[PreparedImage],
        tool_images: &[usize],
    ) -> Result<Vec<u32>> {
        let ids = self.prompt_ids(messages, tools, thinking)?;
        if images.is_empty() {
            return Ok(ids);
        }
        let tokens = self.image_tokens.ok_or_else(|| {
            LlmError::Model("the tokenizer has no image tokens: this model takes no images".into())
        })?;
        let response_end = self.tokenizer.special().tool_response_end.id;
        let ids = tokens.splice_tool_images(&ids, response_end, tool_images)?;
        let counts: Vec<usize> = images.iter().map(|i| i.soft_tokens).collect();
        let ids = tokens.expand(&ids, &counts)?;
        self.check_fits(&ids)?;
        Ok(ids)
    }

    /// Encodes each image with `encoder`, checking that its features have one row per soft
    /// token of the model's hidden size.
    pub async fn encode_images(
        &self,
        images: &[PreparedImage],
        encoder: &dyn ImageEncoder,
    ) -> Result<Vec<Value>> {
        let mut out = Vec::with_capacity(images.len());
        for (i, img) in images.iter().enumerate() {
            let f = encoder.encode(img).await?;
            let shape = f.shape();
            let hidden_ok = self.hidden_size().is_none_or(|h| shape.get(1) == Some(&h));
            if shape.len() != 2 || shape[0] != img.soft_tokens || !hidden_ok {
                return Err(LlmError::Model(format!(
                    "the vision encoder gave features of shape {shape:?} for image {} of {} soft tokens; expected [{}, hidden size {}]",
                    i + 1,
                    img.soft_tokens,
                    img.soft_tokens,
                    self.hidden_size().map_or("?".into(), |h| h.to_string())
                )));
            }
            out.push(f);
        }
        Ok(out)
    }

    /// The prompt ids of a conversation with images and its features: `images` are the
    /// conversation's images in prompt order (`tool_images` as for
    /// [`GemmaModel::prompt_ids_with_tool_images`]), each preprocessed at `max_soft_tokens`,
    /// its placeholder expanded and the image encoded by `encoder`.
    pub async fn prompt_with_images(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDeclaration],
        thinking: bool,
        images: &[ImageInput],
        tool_images: &[usize],
        max_soft_tokens: usize,
        encoder: &dyn ImageEncoder,
    ) -> Result<(Vec<u32>, Vec<Value>)> {
        let prepared = self.prepare_images(images, max_soft_tokens)?;
        let ids =
            self.prompt_ids_with_tool_images(messages, tools, thinking, &prepared, tool_images)?;
        let features = self.encode_images(&prepared, encoder).await?;
        Ok((ids, features))
    }

    /// Starts a generation after a conversation with images
    /// ([`GemmaModel::prompt_with_images`]), the features fed at their tokens.
    pub async fn stream_with_images(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDeclaration],
        thinking: bool,
        images: &[ImageInput],
        tool_images: &[usize],
        max_soft_tokens: usize,
        encoder: &dyn ImageEncoder,
        options: TextOptions,
    ) -> Result<TextStream<'_>> {
        let (ids, features) = self
            .prompt_with_images(
                messages,
                tools,
                thinking,
                images,
                tool_images,
                max_soft_tokens,
                encoder,
            )
            .await?;
        TextStream::with_image_features(self, &ids, options, features)
    }
}
