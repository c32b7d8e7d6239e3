// Image features into the prompt's embeddings (transformers' masked_scatter of the image
// features over the image-token rows): y[s, h] = features[rows[s], h] where rows[s] >= 0, else
// embeds[s, h]. embeds / y: [S, hidden]; features: [n, hidden]; rows: [S] (i32, -1 for a text
// token). Parameters: `MergeParams` (merge.rs): n (elements of y), hidden.
fn compute(i: u32) -> f32 {
    let s = i / prm.hidden;
    let r = ldi_rows(s);
    if (r >= 0) {
        return ld_features(u32(r) * prm.hidden + i % prm.hidden);
    }
    return ld_embeds(i);
}
