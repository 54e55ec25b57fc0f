#!/usr/bin/env bash
# Render a run's report page with headless Chromium and save a screenshot: the check that the HTML
# report is readable as a person sees it, not only well-formed.
#   scripts/report_screenshot.sh RUN_DIR OUT_PNG
# The report is written to a temporary folder (the run directory is left as it is). Needs the
# `chromium` Debian package and ptxbench with its `report` extra on PYTHON (default: python3).
# WIDTH and HEIGHT (default 1400x2400) set the window, and so the screenshot's size.
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 RUN_DIR OUT_PNG" >&2
    exit 2
fi
run_dir=$1
out_png=$2
python=${PYTHON:-python3}
chromium=${CHROMIUM:-/usr/bin/chromium}
width=${WIDTH:-1400}
height=${HEIGHT:-2400}

if [ ! -x "$chromium" ]; then
    echo "$chromium not found: apt-get install chromium (or set CHROMIUM)" >&2
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" - "$run_dir" "$work/report" <<'EOF'
import sys
from pathlib import Path

from ptxbench.results.report import write_report

write_report(Path(sys.argv[1]), Path(sys.argv[2]))
EOF

mkdir -p "$(dirname "$out_png")"
out_abs=$(cd "$(dirname "$out_png")" && pwd)/$(basename "$out_png")
rm -f "$out_abs"
timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
    --user-data-dir="$work/profile" --window-size="$width,$height" --screenshot="$out_abs" \
    "file://$work/report/report.html" >"$work/chromium.log" 2>&1 || {
    cat "$work/chromium.log" >&2
    exit 1
}
if [ ! -s "$out_abs" ]; then
    echo "chromium wrote no screenshot" >&2
    cat "$work/chromium.log" >&2
    exit 1
fi
echo "$out_abs"
