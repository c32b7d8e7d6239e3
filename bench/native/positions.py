#!/usr/bin/env python3
"""How many positions a model's decoder graph can compute: the fewest rows of a table it indexes
by position, when that table is an initializer: the `cos_cache` of a rotary GroupQueryAttention
(indexed by the positions it derives from the mask) and the data of a `Gather` of the
`position_ids` input (the standard-Attention exports' rotary tables). mobius writes tables of the checkpoint's
`max_position_embeddings` rows and may state a longer `context_length` in genai_config.json;
ONNX Runtime refuses a longer sequence ("cos_cache dimension 0 shall not be less than
total_sequence_length") and so does our runtime's GroupQueryAttention.

    python bench/native/positions.py MODEL_DIR

prints the number, or `none` when the decoder has no such table (or the folder is no GenAI
package: the onnx-community layout's config.json states its limit).
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
    """The table rows of a GenAI package's decoder (None otherwise)."""
    try:
        with open(os.path.join(folder, "genai_config.json")) as f:
            decoder = json.load(f)["model"]["decoder"]["filename"]
    except FileNotFoundError:
        return None
    graph = onnx.load(os.path.join(folder, decoder), load_external_data=False).graph
    return table_rows(graph)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    n = limit(sys.argv[1])
    print("none" if n is None else n)
