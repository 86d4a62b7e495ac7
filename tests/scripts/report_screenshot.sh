#!/usr/bin/env bash
# The report page in a real browser: Chromium (headless) renders a short run's page to a PNG,
# and the picture is checked with Pillow: the page's size, a dark header band across the top,
# and the loss curve's colour (#ee4c2c) and the validation curve's (#2563eb) drawn below it. Skips (77) with a message where Chromium is not installed
# (apt-get install chromium); scripts/deps.sh does not install it.
set -euo pipefail
titan=$1; python=$2; text=$3
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "SKIP: no Chromium (apt-get install chromium) to render the report page"; exit 77; }
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
"$titan" train --set n_layers=2 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16 \
  --set ffn_dim=128 --set vocab_size=256 --data "$text" --batch 2 --seq-len 32 --lr 3e-3 \
  --warmup 3 --seed 7 --peak-tflops 1 --steps 12 --log-freq 4 --metrics.enable_jsonl \
  --validation.enable --validation.dataset_path "$text" --validation.freq 4 --validation.steps 2 \
  --validation.seq_len 32 --validation.local_batch_size 2 --dump-folder "$out/run" > /dev/null
# its own profile: no first-run dialogs, nothing shared with a desktop session
timeout 120 "$browser" --headless=new --no-sandbox --disable-gpu --hide-scrollbars \
  --user-data-dir="$out/profile" --window-size=1280,1400 --screenshot="$out/page.png" \
  "file://$out/run/report.html" > "$out/chromium.log" 2>&1 ||
  { cat "$out/chromium.log"; echo "FAIL: chromium did not render the page"; exit 1; }
cp "$out/page.png" "${REPORT_PNG:-/dev/null}" # REPORT_PNG=FILE keeps the picture
"$python" - "$out/page.png" <<'PY'
import sys
from PIL import Image
im = Image.open(sys.argv[1]).convert("RGB")
w, h = im.size
fails = []
if (w, h) != (1280, 1400):
    fails.append("screenshot %dx%d, want 1280x1400" % (w, h))
dark = sum(1 for x in range(0, w, 8) if sum(im.getpixel((x, 30))) < 120)
if dark < 0.9 * (w // 8):
    fails.append("no dark header band across the top (%d of %d samples)" % (dark, w // 8))
def near(p, q):
    return all(abs(a - b) <= 40 for a, b in zip(p, q))
# below the header (its accent line is the loss colour): the curves, and a legend swatch each
px = [im.getpixel((x, y)) for y in range(100, h) for x in range(w)]
red = sum(1 for p in px if near(p, (0xee, 0x4c, 0x2c)))
blue = sum(1 for p in px if near(p, (0x25, 0x63, 0xeb)))
if red < 300:
    fails.append("the training-loss curve: %d pixels of its colour in the loss chart" % red)
if blue < 100:
    fails.append("the validation-loss curve: %d pixels of its colour" % blue)
for f in fails:
    print("FAIL:", f)
if fails:
    sys.exit(1)
print("ok: Chromium rendered the page (%dx%d): header band, loss %d px, validation %d px" % (w, h, red, blue))
PY
