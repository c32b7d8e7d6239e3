#!/usr/bin/env bash
# The native bench on a lent GPU machine (the `device` tool), within ~8 minutes.
#
# That machine has no Rust toolchain and no network, but has python3 with numpy + onnx. So:
#   1. here:   bench/device.sh prepare
#              builds gemma-gem and xtask (release, x86-64) into bench/device-bin/ and downloads
#              the Vulkan loader packages into .gl/ (both git-ignored; ~30 MB in all);
#   2. device: run(command: "bash bench/device.sh run", carry: ["bench/device-bin", ".gl"],
#                  timeout_s: 540)
#              unpacks the loader, generates the E2B-shaped model (~30 s), runs
#              `xtask bench --native` (both models, full configuration, 3 runs), then decode
#              after 128 with `--run-ahead off` and `on` alternating (2 each, each after the
#              extension's kernel warm-up: `warm_up` in its JSON), and writes the results
#              (JSON + Markdown, run-ahead-*.json) to $OUT/;
#   3. here:   copy the two files from the returned folder into bench/results/ and commit them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=$ROOT/bench/device-bin

case "${1:-}" in
prepare)
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
  cargo build --release -p gg-cli --bin gemma-gem
  cargo build --release -p xtask
  mkdir -p "$BIN"
  cp "$CARGO_TARGET_DIR/release/gemma-gem" "$CARGO_TARGET_DIR/release/xtask" "$BIN/"
  strip "$BIN/gemma-gem" "$BIN/xtask" 2>/dev/null || true
  mkdir -p .gl /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  # shellcheck disable=SC2086
  apt-get $o update -qq
  # shellcheck disable=SC2086
  (cd .gl && apt-get $o download libvulkan1)
  du -sh "$BIN" .gl
  echo "prepared: now run 'bash bench/device.sh run' on the device with carry [bench/device-bin, .gl]"
  ;;
run)
  [ -x "$BIN/gemma-gem" ] && [ -x "$BIN/xtask" ] || { echo "bench/device-bin is missing: run 'bench/device.sh prepare' here and carry it" >&2; exit 2; }
  if ls .gl/*.deb >/dev/null 2>&1; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
  fi
  if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  fi
  export WGPU_BACKEND=${WGPU_BACKEND:-vulkan}
  export GEMMA_GEM_ROOT=$ROOT GEMMA_GEM_PYTHON=${GEMMA_GEM_PYTHON:-python3}
  OUTDIR=${OUT:-$ROOT/bench/results}
  mkdir -p "$OUTDIR"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
  set -o pipefail
  shift
  # Extra arguments go to `xtask bench` (e.g. `--model tiny --quick` to try this script here).
  "$BIN/xtask" bench --native --runs "${RUNS:-3}" --gemma-gem "$BIN/gemma-gem" \
    --out "$OUTDIR" ${ADAPTER:+--adapter "$ADAPTER"} "$@" 2>&1 | tee "$OUTDIR/device-log.txt"
  # Run-ahead side by side (off, on, off, on): decode after 128 tokens on the E2B-shaped model
  # the bench generated, each after `--warm-up` (what compiling the kernels at load costs on this
  # GPU); JSON per run in $OUT/run-ahead-<on|off>-<i>.json.
  E2B=$ROOT/bench/cache/gemma4-e2b-bench
  if [ -f "$E2B/config.json" ] && [ -z "${NO_RUN_AHEAD_AB:-}" ]; then
    for i in 1 2; do
      for ra in off on; do
        timeout 120 "$BIN/gemma-gem" bench --model "$E2B" --prefill 16 --decode-context 128 \
          --decode-tokens 64 --runs 1 --run-ahead "$ra" --warm-up ${ADAPTER:+--adapter "$ADAPTER"} \
          > "$OUTDIR/run-ahead-$ra-$i.json" 2>>"$OUTDIR/device-log.txt" || echo "run-ahead $ra $i failed" >&2
        grep -h '"tok_s"' "$OUTDIR/run-ahead-$ra-$i.json" | tail -1 | sed "s/^/run-ahead $ra $i decode: /"
      done
    done
  fi
  ;;
*)
  echo "usage: bench/device.sh prepare   (here: build the binaries, fetch the Vulkan loader)" >&2
  echo "       bench/device.sh run       (on the GPU machine: generate the model, bench, write \$OUT)" >&2
  exit 2
  ;;
esac
