#!/usr/bin/env bash
# Render every example in examples/kube/ and scan the output with checkov (docs/kubernetes.md,
# "checkov"). checkov pins older boto3/packaging/networkx than podserve, so it runs from its
# own virtual environment: CHECKOV=/path/to/venv/bin/checkov, default .checkov-venv (created
# on first use with `pip install checkov`). Exits non-zero on any failed check; every skip
# is a `checkov.io/skipN` annotation with its reason in the rendered objects.
set -euo pipefail
cd "$(dirname "$0")/.."
CHECKOV=${CHECKOV:-.checkov-venv/bin/checkov}
if [ ! -x "$CHECKOV" ]; then
  python3 -m venv .checkov-venv
  .checkov-venv/bin/pip install --quiet checkov
  CHECKOV=.checkov-venv/bin/checkov
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for spec in examples/kube/*.yaml; do
  .venv/bin/podserve render "$spec" -o "$out/$(basename "$spec" .yaml)" > /dev/null
done
"$CHECKOV" -d "$out" --framework kubernetes --compact
