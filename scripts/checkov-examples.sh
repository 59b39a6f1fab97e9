#!/usr/bin/env bash
# Render every example in examples/kube/ and the gateway's (examples/gateway/gateway-k8s.yaml)
# and scan the output with checkov (docs/kubernetes.md, "checkov"). checkov pins older
# boto3/packaging/networkx than podserve, so it runs from its own virtual environment:
# CHECKOV=/path/to/venv/bin/checkov, default .checkov-venv (created on first use with a
# pinned `pip install checkov==$CHECKOV_VERSION`). Exits non-zero on any failed check; every
# skip is a `checkov.io/skipN` annotation with its reason in the rendered objects.
set -euo pipefail
cd "$(dirname "$0")/.."
CHECKOV=${CHECKOV:-.checkov-venv/bin/checkov}
# Pinned: a new checkov release adds checks, and CI must not start failing on its own.
CHECKOV_VERSION=3.3.30
if [ ! -x "$CHECKOV" ]; then
  python3 -m venv .checkov-venv
  .checkov-venv/bin/pip install --quiet "checkov==$CHECKOV_VERSION"
  CHECKOV=.checkov-venv/bin/checkov
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for spec in examples/kube/*.yaml examples/gateway/gateway-k8s.yaml; do
  .venv/bin/podserve render "$spec" -o "$out/$(basename "$spec" .yaml)" > /dev/null
done
# --skip-download: no call to Prisma Cloud for guideline links (CI has no network for it).
"$CHECKOV" -d "$out" --framework kubernetes --compact --skip-download
