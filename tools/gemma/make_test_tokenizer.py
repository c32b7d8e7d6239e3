#!/usr/bin/env python3
"""Write the tiny Gemma-4-style tokenizer used by gg-gemma's unit tests.

Output: runtime/gemma/tests/data/tokenizer.json and generation_config.json and
tokenizer_config.json.

The tokenizer mirrors the structure of Gemma 4's real tokenizer.json (SentencePiece-style BPE,
`\u2581` for spaces, byte fallback `<0xHH>`, special tokens as added tokens) with a vocabulary small
enough to commit. The special tokens sit at Gemma 4's ids (GEMMA4.md section 5): pad 0, eos 1, bos 2,
`<|tool>` 46 ... `<turn|>` 106. Only ASCII letters, digits, some punctuation, a few words and the
single non-ASCII character "\u00e9" are in the vocabulary, so every other character is encoded with
byte-fallback pieces: exactly the case the incremental detokenizer must handle.

Run with the repository venv:  .venv/bin/python tools/gemma/make_test_tokenizer.py
"""

import json
import pathlib

from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "runtime" / "gemma" / "tests" / "data"

SPACE = "\u2581"

# Gemma 4 special tokens at their real ids.
SPECIAL = {
    0: "<pad>",
    1: "<eos>",
    2: "<bos>",
    3: "<unk>",
    4: "<mask>",
    46: "<|tool>",
    47: "<tool|>",
    48: "<|tool_call>",
    49: "<tool_call|>",
    50: "<|tool_response>",
    51: "<tool_response|>",
    52: '<|"|>',
    98: "<|think|>",
    100: "<|channel>",
    101: "<channel|>",
    105: "<|turn>",
    106: "<turn|>",
}
FIRST_FREE = 107

WORDS = [
    "the", "is", "a", "of", "and", "to", "in", "what", "weather", "Paris", "London", "city",
    "call", "response", "declaration", "description", "parameters", "properties", "required",
    "type", "STRING", "OBJECT", "ARRAY", "INTEGER", "NUMBER", "BOOLEAN", "value", "model", "user",
    "system", "thought", "hello", "Hello", "world", "get", "_weather", "temperature", "units",
    "celsius", "true", "false",
]


def main() -> None:
    vocab: dict[str, int] = {}
    for i in range(FIRST_FREE):
        vocab[SPECIAL.get(i, f"<unused{i}>")] = i
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)

    alphabet = [SPACE, "\n", "\u00e9"]
    alphabet += [chr(c) for c in range(ord("a"), ord("z") + 1)]
    alphabet += [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    alphabet += [chr(c) for c in range(ord("0"), ord("9") + 1)]
    alphabet += list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
    for ch in alphabet:
        vocab.setdefault(ch, len(vocab))

    merges: list[tuple[str, str]] = []

    def add_word(word: str) -> None:
        # Left-to-right merge chain: w, wo, wor, word (each merge makes the next prefix).
        current = word[0]
        for ch in word[1:]:
            merged = current + ch
            if merged not in vocab:
                vocab[merged] = len(vocab)
                merges.append((current, ch))
            current = merged

    for w in WORDS:
        add_word(w)
        add_word(SPACE + w)
    for piece in [SPACE + SPACE, "\n\n", "<|", "|>"]:
        add_word(piece)

    model = BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True)
    tok = Tokenizer(model)
    tok.normalizer = normalizers.Replace(" ", SPACE)
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    tok.decoder = decoders.Sequence(
        [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    tok.add_special_tokens(
        [AddedToken(SPECIAL[i], special=True, normalized=False) for i in sorted(SPECIAL)]
    )

    OUT.mkdir(parents=True, exist_ok=True)
    tok.save(str(OUT / "tokenizer.json"), pretty=True)

    for i, s in SPECIAL.items():
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s), i)

    (OUT / "generation_config.json").write_text(
        json.dumps(
            {"bos_token_id": 2, "eos_token_id": [1, 106, 50], "pad_token_id": 0,
             "do_sample": True, "temperature": 1.0, "top_k": 64, "top_p": 0.95},
            indent=2,
        )
        + "\n"
    )
    (OUT / "tokenizer_config.json").write_text(
        json.dumps(
            {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
             "add_bos_token": False, "add_eos_token": False},
            indent=2,
        )
        + "\n"
    )

    # Reference encodings the Rust tests compare against (produced by the Python `tokenizers`).
    samples = [
        "Hello world",
        "<bos><|turn>user\nwhat is the weather in Paris?<turn|>\n<|turn>model\n",
        "caf\u00e9 \u20ac 10 \U0001f600!",
        "\u65e5\u672c\u8a9e",
        '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>',
        "  two  spaces\n\nand lines",
    ]
    ref = []
    for s in samples:
        enc = tok.encode(s, add_special_tokens=False)
        ref.append({"text": s, "ids": enc.ids,
                    "decoded": tok.decode(enc.ids, skip_special_tokens=False)})
    (OUT / "encodings.json").write_text(json.dumps(ref, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {OUT} (vocab {tok.get_vocab_size()})")


if __name__ == "__main__":
    main()
