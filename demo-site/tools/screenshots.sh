#!/usr/bin/env bash
# Screenshots of the component playground in headless Chromium, one PNG per specimen (light and
# dark side by side), plus the tool specimen on a page with hostile global CSS (`?hostile=1`),
# which must look the same as without it.
#
#   demo-site/tools/screenshots.sh [SITE_DIR] [OUT_DIR]
#
# SITE_DIR: the built demo site (default dist/demo-site, from `cargo xtask build`).
# OUT_DIR:  where the PNGs go (default demo-site/docs/screenshots).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
site="${1:-$root/dist/demo-site}"
out="${2:-$root/demo-site/docs/screenshots}"
chromium="${CHROMIUM:-/usr/bin/chromium}"
port="${PORT:-8791}"
[[ -f "$site/playground.html" && -f "$site/pkg/gg_demo_site.js" ]] || {
  echo "no built playground in $site (run cargo xtask build first)" >&2; exit 1; }
mkdir -p "$out"
profile="$(mktemp -d)"
python3 -m http.server "$port" --bind 127.0.0.1 --directory "$site" >/dev/null 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; rm -rf "$profile"' EXIT
sleep 1
shot() { # name window-size query
  "$chromium" --headless=new --no-sandbox --disable-gpu --hide-scrollbars \
    --disable-background-networking --disable-component-update --disable-sync --no-first-run \
    --user-data-dir="$profile" --window-size="$2" --virtual-time-budget=6000 \
    --screenshot="$out/$1.png" "http://127.0.0.1:$port/playground.html?$3" >/dev/null 2>&1
  echo "$out/$1.png"
}
shot launcher 1060,470 "only=launcher"
for s in empty downloading streaming thinking code tools long errors hostile settings; do
  shot "$s" 1060,720 "only=$s"
done
shot banners 1060,1130 "only=banners"
shot tools-hostile-css 1060,720 "only=tools&hostile=1"
