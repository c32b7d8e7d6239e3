#!/usr/bin/env python3
"""How many positions a model's decoder graph can compute: the fewest rows of a table it indexes
by position, when that table is an initializer: the `cos_cache` of a rotary GroupQueryAttention
(indexed by the positions it derives from the mask) and the data of a `Gather` of the
`position_ids` input (the standard-Attention exports' rotary tables). gg_llm's
`DecoderLayout::rotary_positions` reads the same and bounds its context limit by it. mobius
writes tables of the checkpoint's `max_position_embeddings` rows and may state a longer
`context_length` in genai_config.json; ONNX Runtime refuses a longer sequence ("cos_cache
dimension 0 shall not be less than total_sequence_length"), and so does our runtime.

    python bench/native/positions.py MODEL_DIR

prints a GenAI package's limit, the fewest of `context_length` and those rows, or `none` when
nothing bounds it (or the folder is no GenAI package: the onnx-community layout's config.json
states its limit). ort_ep.py and `cargo xtask bench` take their limit for such packages from here.
"""
from __future__ import annotations

import json
import os
import sys

import onnx


def table_rows(graph) -> int | None:
    inits = {i.name: list(i.dims) for i in graph.initializer}
    rows = []
    for n in graph.node:
        table = None
        if n.op_type == "GroupQueryAttention" and any(
            a.name == "do_rotary" and a.i != 0 for a in n.attribute
        ):
            table = n.input[7] if len(n.input) > 7 else None
        elif n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == "position_ids":
            table = n.input[0]
        if table in inits and inits[table]:
            rows.append(inits[table][0])
    return min(rows) if rows else None


def limit(folder: str) -> int | None:
    """A GenAI package's positions: the fewest of genai_config.json's `context_length` and its
    decoder's table rows (None when neither bounds it, or the folder is no GenAI package)."""
    try:
        with open(os.path.join(folder, "genai_config.json")) as f:
            model = json.load(f)["model"]
    except FileNotFoundError:
        return None
    decoder = os.path.join(folder, model["decoder"]["filename"])
    graph = onnx.load(decoder, load_external_data=False).graph
    limits = [model.get("context_length"), table_rows(graph)]
    return min((n for n in limits if n is not None), default=None)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    n = limit(sys.argv[1])
    print("none" if n is None else n)
