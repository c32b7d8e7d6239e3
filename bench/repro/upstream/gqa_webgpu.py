"""Stand-alone reproduction of two ONNX Runtime WebGPU GroupQueryAttention bugs, to attach to the
upstream reports in this folder. Needs only numpy, onnx, onnxruntime (>= 1.24.4) and
onnxruntime-ep-webgpu; nothing of Gemma Gem.

    pip install numpy onnx onnxruntime onnxruntime-ep-webgpu
    python gqa_webgpu.py                      # on the machine's WebGPU adapter
    ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1 VK_ICD_FILENAMES=/path/to/vk_swiftshader_icd.json \
        python gqa_webgpu.py                  # on SwiftShader (4-lane subgroups: case A fails too)

Each case is one com.microsoft GroupQueryAttention node built here, run on the CPU EP and on the
WebGPU plug-in EP with the same inputs, and compared with a causal (windowed) softmax attention
written in numpy. Exit status 1 when the WebGPU EP differs from numpy by more than 1e-3.

A  `subgroups-prompt`: a prompt of 32 rows, no past, no window (the FlashAttention prefill path).
   Wrong from row 4 on where the adapter's subgroups have fewer than 8 lanes.
B  `kv-shared-window-prompt` / `-step`: a KV-shared layer (empty key/value, the whole cache in
   past_key/past_value, as ONNX Runtime GenAI packages of Gemma 4 are exported) with
   local_window_size 8 and 12 positions: the window is ignored, every row attends to all earlier
   positions (any adapter).
"""

import sys
from importlib.metadata import version

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper


def graph(rows, kv_rows, total, window, head, heads=1):
    """The node's model (serialized): `heads` query heads of size `head` on one key/value head,
    `rows` query rows, `kv_rows` new key/value rows, a past of total - kv_rows."""
    node = helper.make_node(
        "GroupQueryAttention",
        ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length"],
        ["output", "present_key", "present_value"],
        domain="com.microsoft", num_heads=heads, kv_num_heads=1, local_window_size=window, scale=1.0)
    f = lambda name, shape: helper.make_tensor_value_info(name, T.FLOAT, shape)
    past = total - kv_rows
    g = helper.make_graph(
        [node], "gqa",
        [f("query", [1, rows, heads * head]), f("key", [1, kv_rows, head]), f("value", [1, kv_rows, head]),
         f("past_key", [1, 1, past, head]), f("past_value", [1, 1, past, head]),
         helper.make_tensor_value_info("seqlens_k", T.INT32, [1]),
         helper.make_tensor_value_info("total_sequence_length", T.INT32, [])],
        [f("output", None), f("present_key", None), f("present_value", None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    return m.SerializeToString()


def feeds(rows, kv_rows, total, head, heads=1, seed=0):
    rng = np.random.default_rng(seed)
    past = total - kv_rows
    return {
        "query": rng.standard_normal((1, rows, heads * head), np.float32),
        "key": rng.standard_normal((1, kv_rows, head), np.float32),
        "value": rng.standard_normal((1, kv_rows, head), np.float32),
        "past_key": rng.standard_normal((1, 1, past, head), np.float32),
        "past_value": rng.standard_normal((1, 1, past, head), np.float32),
        "seqlens_k": np.array([total - 1], np.int32),
        "total_sequence_length": np.array(total, np.int32),
    }


def numpy_attention(x, rows, total, window):
    """[rows, heads * head]: query row r sits at position total - rows + r and sees the keys from
    position - window + 1 (window < 0: from 0) to position; every query head on the one key head."""
    k = np.concatenate([x["past_key"][0, 0], x["key"][0]]).astype(np.float64)
    v = np.concatenate([x["past_value"][0, 0], x["value"][0]]).astype(np.float64)
    d = k.shape[1]
    q = x["query"][0].astype(np.float64).reshape(rows, -1, d)
    out = np.zeros(q.shape)
    for r in range(rows):
        pos = total - rows + r
        lo = 0 if window < 0 else max(0, pos - window + 1)
        for h in range(q.shape[1]):
            s = q[r, h] @ k[lo:pos + 1].T
            p = np.exp(s - s.max())
            out[r, h] = (p / p.sum()) @ v[lo:pos + 1]
    return out.reshape(rows, -1)


def webgpu_device():
    import onnxruntime_ep_webgpu as webgpu_ep  # here: make_gqa.py reuses this file without it

    ort.register_execution_provider_library("webgpu", webgpu_ep.get_library_path())
    devices = [d for d in ort.get_ep_devices() if d.ep_name == webgpu_ep.get_ep_name()]
    if not devices:
        raise SystemExit("no WebGPU EP device (on a software adapter set ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1)")
    return devices[0]


def webgpu_session(model, device):
    so = ort.SessionOptions()
    so.add_provider_for_devices([device], {})
    return ort.InferenceSession(model, sess_options=so)


CASES = [
    # name, query rows, new key/value rows, total positions, local_window_size
    ("subgroups-prompt", 32, 32, 32, -1),
    ("kv-shared-window-prompt", 12, 0, 12, 8),
    ("kv-shared-window-step", 1, 0, 12, 8),
]


def main():
    print(f"onnxruntime {ort.__version__}, onnxruntime-ep-webgpu {version('onnxruntime-ep-webgpu')}")
    device = webgpu_device()
    failed = False
    for name, rows, kv_rows, total, window in CASES:
        model = graph(rows, kv_rows, total, window, 16)
        x = feeds(rows, kv_rows, total, 16)
        want = numpy_attention(x, rows, total, window)
        cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(["output"], x)[0][0]
        gpu = webgpu_session(model, device).run(["output"], x)[0][0]
        d_cpu = np.abs(cpu - want).max()
        per_row = np.abs(gpu - want).max(axis=1)
        bad = [r for r in range(rows) if per_row[r] > 1e-3]
        # What a windowless attention gives, to name the cause of case B.
        d_windowless = np.abs(gpu - numpy_attention(x, rows, total, -1)).max() if window >= 0 else None
        verdict = "DIFF" if bad else "ok  "
        failed |= bool(bad)
        print(f"{verdict} {name}: CPU EP vs numpy {d_cpu:.1e}; WebGPU EP vs numpy {per_row.max():.3e}"
              + (f" (rows {bad[0]}..{bad[-1]} wrong, {len(bad)} of {rows})" if bad else "")
              + (f"; WebGPU EP vs a windowless attention {d_windowless:.1e}" if d_windowless is not None else ""))
    print(f"device: {device.device.vendor} {device.device.type} {dict(device.device.metadata)}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
