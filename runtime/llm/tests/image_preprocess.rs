//! Preprocessing equals transformers' Gemma 4 image processor (torchvision backend) bit for bit:
//! `pixel_values` and positions of every case in `tests/fixtures/images/reference.json`
//! (written by `tools/fixtures/gen_image_refs.py`), on PNG, JPEG, WebP, RGBA and grey images,
//! square, wide, tall, thin, odd-sized and upscaled, at Gemma 4's patch 16 and the tiny
//! fixtures' patch 4.
//!
//! JPEG: decoders differ (the `image` crate's zune-jpeg vs Pillow's libjpeg-turbo: IDCT and
//! chroma upsampling), so for a JPEG the reference also holds Pillow's decoded pixels; the
//! pipeline on those must be exact, and the end-to-end difference is bounded and printed.

use gg_llm::image::{ImageConfig, decode_rgb, preprocess, preprocess_rgb, target_size};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/images")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha_f32(v: &[f32]) -> String {
    let mut h = Sha256::new();
    for x in v {
        h.update(x.to_le_bytes());
    }
    hex(&h.finalize())
}

fn sha_i64(v: &[i64]) -> String {
    let mut h = Sha256::new();
    for x in v {
        h.update(x.to_le_bytes());
    }
    hex(&h.finalize())
}

fn num(c: &Value, k: &str) -> usize {
    c[k].as_u64()
        .unwrap_or_else(|| panic!("reference case lacks {k}: {c}")) as usize
}

#[test]
fn preprocessing_equals_transformers() {
    let text = std::fs::read_to_string(dir().join("reference.json")).expect("reference.json");
    let reference: Value = serde_json::from_str(&text).expect("reference JSON");
    let cases = reference["cases"].as_array().expect("cases");
    assert!(cases.len() >= 5, "expected at least 5 cases");
    let mut failures = Vec::new();
    for c in cases {
        let name = c["image"].as_str().expect("image name");
        let bytes = std::fs::read(dir().join(name)).expect("image file");
        let cfg = ImageConfig {
            patch_size: num(c, "patch_size"),
            pooling_kernel_size: num(c, "pooling_kernel_size"),
            max_soft_tokens: num(c, "max_soft_tokens"),
            ..ImageConfig::default()
        };
        let label = format!(
            "{name} (patch {}, {} soft tokens)",
            cfg.patch_size, cfg.max_soft_tokens
        );
        let ours = preprocess(&bytes, &cfg).unwrap_or_else(|e| panic!("{label}: {e}"));
        let img = match c["decoded"].as_str() {
            None => ours,
            Some(decoded) => {
                // Pillow's decode of the same JPEG, through our pipeline: must be exact below
                let pil = decode_rgb(&std::fs::read(dir().join(decoded)).expect("image reference"))
                    .expect("image reference");
                let ref_img = preprocess_rgb(&pil, &cfg).expect("image reference");
                let rgb = decode_rgb(&bytes).expect("image reference");
                let dec_diff = rgb
                    .data
                    .iter()
                    .zip(&pil.data)
                    .map(|(a, b)| a.abs_diff(*b))
                    .max();
                let pv_diff = ours
                    .pixel_values
                    .iter()
                    .zip(&ref_img.pixel_values)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                println!(
                    "{label}: JPEG decoded by the image crate vs Pillow: max |diff| {dec_diff:?} of 255; pixel_values max |diff| {pv_diff}"
                );
                assert_eq!(ours.positions, ref_img.positions, "{label}");
                assert!(
                    pv_diff <= 10.0 / 255.0,
                    "{label}: JPEG pixel values differ by {pv_diff}"
                );
                ref_img
            }
        };
        let want_w = c["resized"][0].as_u64().expect("image reference") as usize;
        let want_h = c["resized"][1].as_u64().expect("image reference") as usize;
        assert_eq!(
            (img.width, img.height),
            (want_w, want_h),
            "{label}: resized size"
        );
        let input_w = c["input_size"][0].as_u64().expect("image reference") as usize;
        let input_h = c["input_size"][1].as_u64().expect("image reference") as usize;
        assert_eq!(
            target_size(input_h, input_w, &cfg).expect("image reference"),
            (want_h, want_w),
            "{label}"
        );
        assert_eq!(img.num_patches, num(c, "num_patches"), "{label}: patches");
        assert_eq!(
            img.soft_tokens,
            num(c, "soft_tokens"),
            "{label}: soft tokens"
        );
        assert_eq!(
            cfg.soft_tokens(input_h, input_w).expect("image reference"),
            img.soft_tokens,
            "{label}"
        );
        assert_eq!(
            img.pixel_values.len(),
            img.max_patches * cfg.patch_dim(),
            "{label}"
        );
        assert_eq!(img.positions.len(), img.max_patches * 2, "{label}");
        assert_eq!(
            sha_i64(&img.positions),
            c["positions_sha256"],
            "{label}: positions"
        );
        if sha_f32(&img.pixel_values) != c["pixel_values_sha256"] {
            // locate the first row of patches whose byte sum differs
            let per_row = (img.width / cfg.patch_size) * cfg.patch_dim();
            let sums: Vec<i64> = img.pixel_values[..img.num_patches * cfg.patch_dim()]
                .chunks(per_row)
                .map(|r| r.iter().map(|v| (v * 255.0).round() as i64).sum())
                .collect();
            let want: Vec<i64> = c["row_sums"]
                .as_array()
                .expect("image reference")
                .iter()
                .map(|v| v.as_i64().expect("image reference"))
                .collect();
            let first = sums.iter().zip(&want).position(|(a, b)| a != b);
            failures.push(format!(
                "{label}: pixel_values differ; first row of patches with another byte sum: {first:?} (got {:?}, expected {:?})",
                first.map(|i| sums[i]),
                first.map(|i| want[i])
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn processor_configs_parse() {
    let genai = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/models/mobius-tiny-gqa-int4-split/image_processor.json"),
    )
    .expect("image reference");
    let cfg = ImageConfig::parse(&genai).expect("image reference");
    assert_eq!(
        (cfg.patch_size, cfg.pooling_kernel_size, cfg.max_soft_tokens),
        (4, 3, 280)
    );
    // transformers' preprocessor_config.json keys (values of the real Gemma 4 processor)
    let hf = br#"{"image_processor_type": "Gemma4ImageProcessor", "patch_size": 16,
        "pooling_kernel_size": 3, "max_soft_tokens": 280, "rescale_factor": 0.00392156862745098,
        "do_normalize": false}"#;
    let cfg = ImageConfig::parse(hf).expect("image reference");
    assert_eq!(
        (cfg.patch_size, cfg.max_patches(), cfg.patch_dim()),
        (16, 2520, 768)
    );
    // processor_config.json nests them
    let nested = br#"{"image_processor": {"patch_size": 16, "max_soft_tokens": 560}, "image_seq_length": 280}"#;
    assert_eq!(
        ImageConfig::parse(nested)
            .expect("image reference")
            .max_soft_tokens,
        560
    );
    let err = cfg.with_max_soft_tokens(100).unwrap_err().to_string();
    assert!(err.contains("70, 140, 280, 560, 1120"), "{err}");
    assert_eq!(
        cfg.with_max_soft_tokens(1120)
            .expect("image reference")
            .max_patches(),
        10080
    );
}

#[test]
fn bad_images_give_clear_errors() {
    let cfg = ImageConfig::default();
    let e = preprocess(b"not an image at all", &cfg)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a PNG, JPEG or WebP"), "{e}");
    let gif = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;";
    let e = preprocess(gif, &cfg).unwrap_err().to_string();
    assert!(e.contains("PNG, JPEG and WebP are supported"), "{e}");
    let png = std::fs::read(dir().join("square_120.png")).expect("image reference");
    let e = preprocess(&png[..png.len() / 2], &cfg)
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot be decoded"), "{e}");
    let e = target_size(0, 10, &cfg).unwrap_err().to_string();
    assert!(e.contains("empty"), "{e}");
    let e = target_size(100_000, 100_000, &cfg).unwrap_err().to_string();
    assert!(e.contains("megapixels"), "{e}");
    // a 1×2 image is scaled up to the budget
    let small = cfg.with_max_soft_tokens(70).expect("image reference");
    assert_eq!(
        target_size(1, 2, &small).expect("image reference"),
        (240, 528)
    );
}
