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
