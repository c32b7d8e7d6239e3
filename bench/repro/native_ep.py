"""Runs a case (make_case.py / make_gqa.py) with ONNX Runtime's native WebGPU plug-in EP and
compares its outputs with the CPU EP's.

    ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1 VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json \
        python bench/repro/native_ep.py CASE

Needs onnxruntime >= 1.24.4 and onnxruntime-ep-webgpu (as bench/native/ort_ep.py).
"""

import json
import os
import sys

import numpy as np
import onnxruntime as ort
import onnxruntime_ep_webgpu as webgpu_ep


def main():
    d = sys.argv[1]
    c = json.load(open(os.path.join(d, "case.json")))
    ort.register_execution_provider_library("webgpu", webgpu_ep.get_library_path())
    devices = [x for x in ort.get_ep_devices() if x.ep_name == webgpu_ep.get_ep_name()]
    if not devices:
        raise SystemExit("no WebGPU EP device (see the usage line)")
    so = ort.SessionOptions()
    so.add_provider_for_devices([devices[0]], {})
    s = ort.InferenceSession(os.path.join(d, "model.onnx"), sess_options=so)
    feeds = {i["name"]: np.fromfile(os.path.join(d, i["file"]), i["type"]).reshape(i["dims"]) for i in c["inputs"]}
    names = [o.name for o in s.get_outputs()]
    got = dict(zip(names, s.run(None, feeds)))
    print(f"onnxruntime {ort.__version__}, onnxruntime-ep-webgpu {getattr(webgpu_ep, '__version__', '?')}, "
          f"device {devices[0].device.metadata if hasattr(devices[0].device, 'metadata') else devices[0].device}")
    for o in c["outputs"]:
        ref = np.fromfile(os.path.join(d, "cpu", o["file"]), o["type"]).reshape(o["dims"]).astype(np.float64)
        v = got[o["name"]].astype(np.float64)
        diff = float(np.abs(ref - v).max()) if ref.size else 0.0
        if o["name"] == "logits":
            top = lambda a: (int(np.argmax(a[0, -1])), float(np.sort(a[0, -1])[-1] - np.sort(a[0, -1])[-2]))
            print(f"     logits, last position: cpu argmax/gap {top(ref)}, webgpu ep {top(v)}")
        print(f"{'ok  ' if diff <= 1e-3 * max(1.0, float(np.abs(ref).max(initial=0))) else 'DIFF'} {o['name']} max|d| {diff:.3e}")


if __name__ == "__main__":
    main()
