//! Image tokens in the prompt: the chat template writes one `<|image|>` per image part; as
//! transformers' `Gemma4Processor` does, each becomes `<|image>` + `<|image|>`×n + `<image|>`,
//! n being that image's soft-token count (what its vision encoder output has rows). The ids are
//! read from the tokenizer by their text, never hard-coded.

use crate::error::{Result, TextError};
use crate::tokenizer::GemmaTokenizer;

/// The ids of an image's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageTokens {
    /// `<|image|>`: the placeholder the template writes, and each soft token's id.
    pub image: u32,
    /// `<|image>`: begins an image.
    pub begin: u32,
    /// `<image|>`: ends an image.
    pub end: u32,
}

/// Texts of the tokens (Gemma 4's tokenizer; the processor's `image_token`, `boi_token`,
/// `eoi_token`).
pub const IMAGE_TOKEN: &str = "<|image|>";
/// See [`IMAGE_TOKEN`].
pub const BEGIN_IMAGE: &str = "<|image>";
/// See [`IMAGE_TOKEN`].
pub const END_IMAGE: &str = "<image|>";

impl ImageTokens {
    /// Reads the three ids from the tokenizer; an error names the missing tokens (a tokenizer
    /// without them belongs to a model that cannot take images).
    pub fn from_tokenizer(tokenizer: &GemmaTokenizer) -> Result<Self> {
        let get = |t: &str| tokenizer.token_id(t);
        match (get(IMAGE_TOKEN), get(BEGIN_IMAGE), get(END_IMAGE)) {
            (Some(image), Some(begin), Some(end)) => Ok(Self { image, begin, end }),
            (a, b, c) => {
                let missing: Vec<&str> = [(a, IMAGE_TOKEN), (b, BEGIN_IMAGE), (c, END_IMAGE)]
                    .into_iter()
                    .filter(|(id, _)| id.is_none())
                    .map(|(_, t)| t)
                    .collect();
                Err(TextError::Images(format!(
                    "tokenizer.json has no {}: this model's tokenizer cannot take images",
                    missing.join(", ")
                )))
            }
        }
    }

    /// Expands each `<|image|>` of the rendered prompt `ids` into `<|image>` +
    /// `<|image|>`×`soft_tokens[k]` + `<image|>` for the k-th image, in order. The number of
    /// placeholders must equal the number of images.
    pub fn expand(&self, ids: &[u32], soft_tokens: &[usize]) -> Result<Vec<u32>> {
        let placeholders = ids.iter().filter(|&&i| i == self.image).count();
        if placeholders != soft_tokens.len() {
            return Err(TextError::Images(format!(
                "the prompt has {placeholders} image placeholder(s) ({IMAGE_TOKEN}) but {} image(s) were given",
                soft_tokens.len()
            )));
        }
        if let Some(&z) = soft_tokens.iter().find(|&&n| n == 0) {
            return Err(TextError::Images(format!(
                "an image of {z} soft tokens cannot be placed"
            )));
        }
        let extra: usize = soft_tokens.iter().map(|n| n + 1).sum();
        let mut out = Vec::with_capacity(ids.len() + extra);
        let mut next = soft_tokens.iter();
        for &id in ids {
            if id == self.image {
                let n = *next.next().unwrap_or(&0);
                out.push(self.begin);
                out.extend(std::iter::repeat_n(self.image, n));
                out.push(self.end);
            } else {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// Places the images tools returned (a screenshot): the template has no place for them in
    /// Gemma's tool-response syntax, so after the rendering, `tool_images[k]` placeholders
    /// (`<|image|>`) are inserted right after the k-th `<tool_response|>` (`response_end`) of the
    /// rendered prompt `ids`, inside the model's turn, where the tool's result ends — what
    /// the model reads next is the screenshot. Every tool response the template rendered must
    /// have its entry (0 for none); a count mismatch is an error (the prompt and the list of
    /// tool responses disagree). Tool responses are untrusted text that never becomes a
    /// `<tool_response|>` token, so only the template's own markers are counted.
    pub fn splice_tool_images(
        &self,
        ids: &[u32],
        response_end: u32,
        tool_images: &[usize],
    ) -> Result<Vec<u32>> {
        if tool_images.iter().all(|&n| n == 0) {
            return Ok(ids.to_vec());
        }
        let ends = ids.iter().filter(|&&i| i == response_end).count();
        if ends != tool_images.len() {
            return Err(TextError::Images(format!(
                "the prompt has {ends} tool response(s) but images were given for {}",
                tool_images.len()
            )));
        }
        let extra: usize = tool_images.iter().sum();
        let mut out = Vec::with_capacity(ids.len() + extra);
        let mut next = tool_images.iter();
        for &id in ids {
            out.push(id);
            if id == response_end {
                let n = *next.next().unwrap_or(&0);
                out.extend(std::iter::repeat_n(self.image, n));
            }
        }
        Ok(out)
    }

    /// Positions of the soft tokens in an expanded prompt (where the features go, in order).
    pub fn positions(&self, ids: &[u32]) -> Vec<usize> {
        ids.iter()
            .enumerate()
            .filter(|(_, i)| **i == self.image)
            .map(|(p, _)| p)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: ImageTokens = ImageTokens {
        image: 110,
        begin: 113,
        end: 114,
    };

    #[test]
    fn each_placeholder_becomes_its_image() {
        let ids = [2, 105, 7, 110, 8, 110, 106];
        let out = T.expand(&ids, &[2, 3]).expect("expansion");
        assert_eq!(
            out,
            [
                2, 105, 7, 113, 110, 110, 114, 8, 113, 110, 110, 110, 114, 106
            ]
        );
        assert_eq!(T.positions(&out), [4, 5, 9, 10, 11]);
        assert_eq!(T.expand(&[2, 7], &[]).expect("expansion"), [2, 7]);
    }

    #[test]
    fn tool_images_follow_their_response() {
        // 50/51: <|tool_response> / <tool_response|>
        let ids = [2, 48, 9, 49, 50, 7, 51, 50, 8, 51];
        let out = T.splice_tool_images(&ids, 51, &[0, 2]).expect("splice");
        assert_eq!(out, [2, 48, 9, 49, 50, 7, 51, 50, 8, 51, 110, 110]);
        let out = T.splice_tool_images(&ids, 51, &[1, 0]).expect("splice");
        assert_eq!(out, [2, 48, 9, 49, 50, 7, 51, 110, 50, 8, 51]);
        // no images: the ids as they are, whatever the count
        assert_eq!(T.splice_tool_images(&ids, 51, &[]).expect("none"), ids);
        let e = T
            .splice_tool_images(&ids, 51, &[1])
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 tool response(s)"), "{e}");
        // then expanded like any placeholder
        let out = T
            .splice_tool_images(&[50, 7, 51], 51, &[1])
            .expect("splice");
        assert_eq!(
            T.expand(&out, &[2]).expect("expand"),
            [50, 7, 51, 113, 110, 110, 114]
        );
    }

    #[test]
    fn counts_must_agree() {
        let e = T.expand(&[2, 110], &[4, 4]).unwrap_err().to_string();
        assert!(
            e.contains("1 image placeholder(s)") && e.contains("2 image(s)"),
            "{e}"
        );
        let e = T.expand(&[2, 110, 110], &[4]).unwrap_err().to_string();
        assert!(e.contains("2 image placeholder(s)"), "{e}");
        assert!(T.expand(&[110], &[0]).is_err());
    }
}
