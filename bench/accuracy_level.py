"""A copy of an ONNX Runtime GenAI package with every MatMulNBits' accuracy_level set to one value.

    python bench/accuracy_level.py SRC DST N

`cargo xtask bench --accuracy-level N` runs this. mobius writes accuracy_level 4 (int8
activations allowed); 0 asks every runtime for exact math, which is what ours computes at any
level. Each `.onnx` graph of SRC is rewritten into DST; every other file (the external weights
among them) is copied: neither ONNX Runtime nor the onnx package reads external data through a
symbolic or a hard link ("escapes model directory", "potential hardlink attack"). DST is reused
when its stamp (`.accuracy_level.json`: the level and every source file's size and mtime) is
current. Prints how many nodes changed in each graph.
"""

import json
import os
import shutil
import sys

import onnx
from onnx import helper

from stamp import source_files

STAMP = ".accuracy_level.json"


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    src, dst, level = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), int(sys.argv[3])
    if level not in range(5):
        raise SystemExit(f"accuracy_level must be 0 to 4 (got {level})")
    if not os.path.isfile(os.path.join(src, "genai_config.json")):
        raise SystemExit(f"{src} is not an ONNX Runtime GenAI package (no genai_config.json)")
    files = source_files(src)
    stamp = {"source": src, "accuracy_level": level, "files": files}
    try:
        with open(os.path.join(dst, STAMP)) as f:
            if json.load(f) == stamp:
                print(f"{dst}: current (accuracy_level {level})")
                return
    except (OSError, ValueError):
        pass
    if os.path.exists(dst):
        shutil.rmtree(dst)
    for rel, _, _ in files:
        s, d = os.path.join(src, rel), os.path.join(dst, rel)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        if not rel.endswith(".onnx"):
            shutil.copyfile(s, d)
            continue
        m = onnx.load(s, load_external_data=False)
        changed = 0
        for n in m.graph.node:
            if n.op_type != "MatMulNBits":
                continue
            keep = [a for a in n.attribute if a.name != "accuracy_level"]
            del n.attribute[:]
            n.attribute.extend(keep)
            n.attribute.append(helper.make_attribute("accuracy_level", level))
            changed += 1
        onnx.save(m, d)
        print(f"{rel}: accuracy_level {level} on {changed} MatMulNBits")
    with open(os.path.join(dst, STAMP), "w") as f:
        json.dump(stamp, f)


if __name__ == "__main__":
    main()
