#!/usr/bin/env bash
# The bench on a real GPU (issue 33): ours vs ONNX Runtime's WebGPU EP natively on a lent GPU
# machine (the `device` tool), and ours vs onnxruntime-web vs transformers.js in Chromium on any
# machine with a GPU, Chromium, Node and Rust. Software adapters are refused: the GPU runs are the
# speed claims, everything measured on SwiftShader / lavapipe is a regression indicator.
#
# Lent GPU machine (no Rust, no Node, no Chromium, no network; python3 3.12 with numpy, onnx and
# onnxruntime >= 1.24.4; everything it needs travels in `carry`, 64 MiB in all):
#   1. here:   bench/device.sh prepare
#              builds gemma-gem and xtask (release, x86-64, xz) into bench/device-bin/, downloads the
#              Vulkan loader into .gl/ and the onnxruntime-ep-webgpu wheel (cp312) into .whl/
#              (all git-ignored), then runs `bench/device.sh check`;
#   2. device: run(command: "bash bench/device.sh run", carry: ["bench/device-bin", ".gl", ".whl"],
#                  timeout_s: 560)
#              installs the wheel into /tmp/site, unpacks the loader, points Vulkan at the NVIDIA
#              driver, checks that wgpu's adapter is not a software one, generates the E2B-shaped
#              model (~30 s), then (within ~9 minutes):
#                - `xtask bench --native --ort-ep`, E2B-shaped, full configuration (prefill 128 and
#                  512, 32 decode steps after 128 and after 1024), q4f16 (PAIRS, default 5) and q4
#                  (PAIRS_Q4, default 3): ours vs `ort_webgpu_ep` in seeded shuffled pairs, the
#                  greedy ids compared (a mismatch keeps that step's results and the later steps
#                  still run; the script then exits 4 at the end, naming the step);
#                - decode after 128 with run-ahead off / on alternating (NO_RUN_AHEAD_AB=1 skips);
#              and writes the results (JSON + Markdown, the adapter and driver in device-env.txt)
#              to $OUT/;
#   3. here:   copy the returned files into bench/results/ and commit them.
#   Gemma 4 E2B's full shapes (35 layers, `--model e2b-full`), a second call of its own (it does not
#   fit beside the above in one call's 9 minutes; the two calls use ~13 of the session's 15 minutes):
#   device: run(command: "bash bench/device.sh run-full", carry: [the same], timeout_s: 560)
#              the same setup and adapter check, generates the model on the device (q4f16 only:
#              ~3 GB, about 1.5 minutes; only the generator travels), then `xtask bench --native
#              --ort-ep --model e2b-full --dtype q4f16`, full configuration, PAIRS_FULL (default 3)
#              pairs and RUNS_FULL (default 2) runs of ours (estimated ~5 minutes on an H100: about
#              8 model loads of ~3 GB; not yet run on a GPU).
#
# Browser (a machine with an NVIDIA / AMD / Intel GPU, Chromium, Node 20+ and Rust):
#   bench/device.sh browser [extra xtask bench arguments]
#   runs `cargo xtask bench --browser --model e2b-bench --require-gpu` (5 pairs, full configuration,
#   q4f16 then q4), then the exporters' form `--model mobius-e2b-bench` (mobius's --ep cpu profile,
#   q4) against the three peers, once with `--accuracy-level 0` (the token check) and once as
#   exported (accuracy_level 4, int8 allowed: its token mismatch is expected on random weights and
#   not fatal), then `--model mobius-tiny-webgpu-q4f16` and `mobius-e2b-bench-webgpu-q4f16` (its
#   --ep webgpu profile, q4f16, graph capture for ort_web_static; no token mismatch fatal there),
#   with Chromium flags that use the GPU (Vulkan through ANGLE, the GPU blocklist ignored, no
#   software rasterizer); --require-gpu fails the run when Chromium's WebGPU adapter is
#   SwiftShader or another fallback adapter. Every step runs even when one before it found
#   differing greedy ids (its results are kept); the script then exits 4, naming those steps.
#
#   bench/device.sh check     (here) the prepared files exist, run, and fit the 64 MiB carry.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# Carried xz-compressed (the carry is 64 MiB in all); unpacked into $BIN where they run.
PACKED=$ROOT/bench/device-bin
BIN=${DEVICE_BIN:-/tmp/gg-device-bin}
CARRY_LIMIT=$((64 * 1024 * 1024))
# Chromium on a real GPU, headless: WebGPU on, Vulkan through ANGLE, no blocklist, no SwiftShader.
GPU_FLAGS=(--enable-unsafe-webgpu --ignore-gpu-blocklist --enable-gpu --use-angle=vulkan
  --enable-features=Vulkan,VulkanFromANGLE,WebGPUService --disable-vulkan-surface
  --disable-software-rasterizer --disable-gpu-sandbox)

unpack() {
  mkdir -p "$BIN"
  for b in gemma-gem xtask; do
    [ -f "$PACKED/$b.xz" ] || { echo "$PACKED/$b.xz is missing: run 'bench/device.sh prepare' here and carry bench/device-bin" >&2; exit 2; }
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$PACKED/$b.xz" "$BIN/$b"
    chmod +x "$BIN/$b"
  done
}

# A bench step: `step fatal|known:<why> <what> <command...>`. Its output goes to the terminal (and
# is appended to $LOG when set). Any failure but a greedy-id mismatch stops the script at once. A
# mismatch keeps the step's results (the bench writes them before its token check) and the script
# goes on to the next step: one failed check does not cost the GPU time of the steps after it.
# "fatal": the mismatch is recorded and `finish` exits 4 naming it; "known:<why>": a difference
# expected for that reason, reported only.
MISMATCHES=()
step() {
  local kind=$1 what=$2 out
  shift 2
  out=$(mktemp)
  if ! "$@" 2>&1 | tee -a "$out" ${LOG:+"$LOG"}; then
    if ! grep -q "the runtimes disagree on the greedy tokens" "$out"; then
      rm -f "$out"
      echo "bench/device.sh: $what failed" >&2
      exit 1
    fi
    if [ "$kind" = fatal ]; then
      MISMATCHES+=("$what")
      echo "bench/device.sh: $what: the greedy ids differ (results kept); going on" >&2
    else
      echo "bench/device.sh: $what: the greedy ids differ (${kind#known:}); results kept" >&2
    fi
  fi
  rm -f "$out"
}
finish() {
  if [ "${#MISMATCHES[@]}" -gt 0 ]; then
    printf 'bench/device.sh: the greedy ids differed in: %s\n' "${MISMATCHES[@]}" >&2
    exit 4
  fi
}

check() {
  local ok=1
  unpack
  ls .gl/libvulkan1_*.deb >/dev/null 2>&1 || { echo "check: .gl/libvulkan1_*.deb is missing" >&2; ok=0; }
  ls .whl/onnxruntime_ep_webgpu-*.whl >/dev/null 2>&1 || { echo "check: .whl/onnxruntime_ep_webgpu-*.whl is missing" >&2; ok=0; }
  [ "$ok" = 1 ] || exit 1
  "$BIN/gemma-gem" bench --help >/dev/null
  "$BIN/xtask" bench --help | grep -q -- '--ort-ep' || { echo "check: $BIN/xtask predates --ort-ep: prepare again" >&2; exit 1; }
  python3 - "$ROOT" <<'PY'
import sys, zipfile, glob
for w in glob.glob(sys.argv[1] + "/.whl/onnxruntime_ep_webgpu-*.whl"):
    names = zipfile.ZipFile(w).namelist()
    assert any(n.endswith("libonnxruntime_providers_webgpu.so") for n in names), f"{w}: no Linux library"
PY
  # What travels: the tracked and untracked-not-ignored tree plus the carried folders.
  local tree carried total
  tree=$(git ls-files -co --exclude-standard -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
  carried=$(du -cb "$PACKED" .gl .whl | tail -1 | cut -f1)
  total=$((tree + carried))
  echo "check: working tree $((tree / 1048576)) MiB + carried $((carried / 1048576)) MiB = $((total / 1048576)) MiB (limit 64)"
  [ "$total" -lt "$CARRY_LIMIT" ] || { echo "check: over the 64 MiB the device tool carries" >&2; exit 1; }
  bash -n "$0"
  echo "check: ready: run(command: \"bash bench/device.sh run\", carry: [\"bench/device-bin\", \".gl\", \".whl\"], timeout_s: 560)"
  echo "check: then, E2B's full shapes: run(command: \"bash bench/device.sh run-full\", the same carry, timeout_s: 560)"
}

case "${1:-}" in
prepare)
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
  cargo build --release -p gg-cli --bin gemma-gem
  cargo build --release -p xtask
  rm -rf "$PACKED" && mkdir -p "$PACKED"
  for b in gemma-gem xtask; do
    cp "$CARGO_TARGET_DIR/release/$b" "$PACKED/$b"
    strip "$PACKED/$b" 2>/dev/null || true
    xz -9 -T0 -f "$PACKED/$b"
  done
  mkdir -p .gl .whl /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  # shellcheck disable=SC2086
  apt-get $o update -qq
  # shellcheck disable=SC2086
  (cd .gl && apt-get $o download libvulkan1)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "onnxruntime-ep-webgpu==${ORT_EP_VERSION:-0.4.0}"
  du -sh "$PACKED" .gl .whl
  check
  ;;
check)
  check
  ;;
run | run-full)
  mode=$1
  unpack
  OUTDIR=${OUT:-$ROOT/bench/results}
  mkdir -p "$OUTDIR"
  LOG=$OUTDIR/device-log.txt
  if ls .gl/*.deb >/dev/null 2>&1; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
  fi
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  fi
  export WGPU_BACKEND=${WGPU_BACKEND:-vulkan}
  export GEMMA_GEM_ROOT=$ROOT GEMMA_GEM_PYTHON=${GEMMA_GEM_PYTHON:-python3} GEMMA_GEM_ORT_EP_PYTHON=${GEMMA_GEM_ORT_EP_PYTHON:-python3}
  export PYTHONUNBUFFERED=1
  {
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
    python3 -c 'import onnxruntime, onnxruntime_ep_webgpu; print("onnxruntime", onnxruntime.__version__, "ep", onnxruntime_ep_webgpu.get_library_path())' 2>&1
  } | tee "$OUTDIR/device-env.txt"
  # The adapter wgpu picks must be the GPU, not lavapipe / llvmpipe / SwiftShader.
  "$BIN/gemma-gem" bench --model tests/fixtures/models/gemma4-tiny --prefill 8 --decode-context 8 \
    --decode-tokens 2 --runs 1 ${ADAPTER:+--adapter "$ADAPTER"} > "$OUTDIR/adapter-check.json" 2>>"$LOG"
  adapter=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["adapter"])' "$OUTDIR/adapter-check.json")
  echo "adapter: $adapter" | tee -a "$OUTDIR/device-env.txt"
  if echo "$adapter" | grep -qiE 'llvmpipe|lavapipe|swiftshader'; then
    echo "the adapter is a software one ($adapter): no GPU driver found; not benching" >&2
    exit 3
  fi
  set -o pipefail
  shift
  if [ "$mode" = run-full ]; then
    # Gemma 4 E2B's full shapes: generated here (bench/cache/gemma4-e2b-full, q4f16 only) by the
    # bench itself, then ours vs ONNX Runtime's WebGPU EP, full configuration.
    step fatal "e2b-full q4f16" "$BIN/xtask" bench --native --ort-ep --model e2b-full --dtype q4f16 \
      --runs "${RUNS_FULL:-2}" --pairs "${PAIRS_FULL:-3}" --seed "${SEED:-33}" \
      --gemma-gem "$BIN/gemma-gem" --out "$OUTDIR" ${ADAPTER:+--adapter "$ADAPTER"} "$@"
    finish
    exit 0
  fi
  # Extra arguments go to `xtask bench` (e.g. `--model tiny --quick` to try this script here).
  for dtype in q4f16 q4; do
    pairs=${PAIRS:-5}
    [ "$dtype" = q4 ] && pairs=${PAIRS_Q4:-3}
    step fatal "e2b-bench $dtype" "$BIN/xtask" bench --native --ort-ep --model e2b-bench \
      --dtype "$dtype" --runs "${RUNS:-3}" --pairs "$pairs" --seed "${SEED:-33}" \
      --gemma-gem "$BIN/gemma-gem" --out "$OUTDIR" ${ADAPTER:+--adapter "$ADAPTER"} "$@"
  done
  # Run-ahead side by side (off, on, off, on): decode after 128 tokens on the E2B-shaped model,
  # each after `--warm-up` (what compiling the kernels at load costs on this GPU); JSON per run in
  # $OUT/run-ahead-<on|off>-<i>.json.
  E2B=$ROOT/bench/cache/gemma4-e2b-bench
  if [ -f "$E2B/config.json" ] && [ -z "${NO_RUN_AHEAD_AB:-}" ]; then
    for i in 1 2; do
      for ra in off on; do
        timeout 120 "$BIN/gemma-gem" bench --model "$E2B" --prefill 16 --decode-context 128 \
          --decode-tokens 64 --runs 1 --run-ahead "$ra" --warm-up ${ADAPTER:+--adapter "$ADAPTER"} \
          > "$OUTDIR/run-ahead-$ra-$i.json" 2>>"$LOG" || echo "run-ahead $ra $i failed" >&2
        grep -h '"tok_s"' "$OUTDIR/run-ahead-$ra-$i.json" | tail -1 | sed "s/^/run-ahead $ra $i decode: /"
      done
    done
  fi
  finish
  ;;
browser)
  shift
  args=()
  for f in "${GPU_FLAGS[@]}"; do args+=("--chromium-arg=$f"); done
  # Every step goes on after a greedy-id mismatch (its results kept; `step` above); a mismatch
  # of a "fatal" step makes the script exit 4 at the end, naming it.
  bench() {
    cargo xtask bench --browser --model "$1" --pairs "${PAIRS:-5}" \
      --seed "${SEED:-33}" --require-gpu --no-release-build "${args[@]}" "${@:2}"
  }
  for dtype in q4f16 q4; do
    step fatal "e2b-bench $dtype" bench e2b-bench --dtype "$dtype" "$@"
  done
  # The targets' graph: the exporters' form of the same model (mobius-e2b-bench, exported with
  # mobius in .venv-mobius on first use), f32 activations, against the three browser peers
  # (transformers.js through the package's onnx-community view, bench/tjs_layout.py). First with
  # every MatMulNBits at accuracy_level 0 (exact math: the peers' greedy ids must equal ours, the
  # check that they compute the same model; the bench itself lets through only the difference it
  # proves to be ONNX Runtime's WebGPU GroupQueryAttention without a window on KV-shared layers:
  # in the decode after 1024, past E2B's 512-token window, the peers' ids must then equal ONNX
  # Runtime's CPU EP's on the graph without those windows, and ours the CPU EP's as written), then
  # as exported (accuracy_level 4: onnxruntime-web's int8 path where the adapter has one, the peer
  # at its fastest). On these random weights int8 activations change the greedy ids (ONNX
  # Runtime's CPU EP at level 4: logits off by 22.6 after 16 tokens, bench/repro/README.md), so
  # that run's token mismatch is reported, not counted.
  step fatal "mobius-e2b-bench --accuracy-level 0" bench mobius-e2b-bench --accuracy-level 0 "$@"
  step "known:as exported, accuracy_level 4: int8 activations; the accuracy-level-0 run is the token check" \
    "mobius-e2b-bench as exported" bench mobius-e2b-bench "$@"
  # mobius's --ep webgpu profile in float16 (q4f16, the committed tiny package): the graph form
  # onnxruntime-web 1.31 accepts graph capture on, so ort_web_static replays a captured decode
  # step (SwiftShader cannot run it: no shader-f16). The peers compute in float16 and ours in f32,
  # so a token mismatch is reported, not counted.
  step "known:float16 peers" "mobius-tiny-webgpu-q4f16" bench mobius-tiny-webgpu-q4f16 \
    --accuracy-level 0 "$@"
  # The same profile at E2B's shapes (exported with mobius on first use, its per-layer table split
  # into float16 tables as for Gemma 4 E2B): graph capture on the targets' shapes. Float16
  # rounding moves the greedy ids on these random weights, so a mismatch is reported only.
  step "known:float16 peers on random E2B-shaped weights" "mobius-e2b-bench-webgpu-q4f16" \
    bench mobius-e2b-bench-webgpu-q4f16 --accuracy-level 0 "$@"
  finish
  ;;
*)
  echo "usage: bench/device.sh prepare   (here: build, fetch the loader and the EP wheel, check)" >&2
  echo "       bench/device.sh check     (here: the prepared files exist and fit the carry)" >&2
  echo "       bench/device.sh run       (on the lent GPU machine: native ours vs ort_webgpu_ep)" >&2
  echo "       bench/device.sh run-full  (on the lent GPU machine: the same on E2B's full 35 layers)" >&2
  echo "       bench/device.sh browser   (a GPU machine with Chromium + Node + Rust: the browser bench)" >&2
  exit 2
  ;;
esac
