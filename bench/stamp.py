"""What the bench's derived model folders (bench/accuracy_level.py, bench/tjs_layout.py) stamp
their source with: every file's path, size and mtime, so a changed source remakes them."""

import os


def source_files(src):
    """[relative path, size, mtime_ns] of every file under `src`, in a stable order."""
    files = []
    for here, _, names in os.walk(src):
        for name in sorted(names):
            p = os.path.join(here, name)
            st = os.stat(p)
            files.append([os.path.relpath(p, src), st.st_size, int(st.st_mtime_ns)])
    return files
