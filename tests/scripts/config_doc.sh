#!/usr/bin/env bash
# docs/config.md embeds `titan train --help`: it must be the current output.
set -euo pipefail
titan=$1; doc=$2
diff <(sed -n '/^```$/,/^```$/p' "$doc" | sed '1d;$d') <("$titan" train --help) ||
  { echo "FAIL: $doc is stale: run scripts/gen_config_doc.sh"; exit 1; }
echo "ok: docs/config.md matches titan train --help"
