#!/usr/bin/env bash
# The test command of the README: lint, then the whole suite (integration tests with the real
# embedded model included). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
. .venv/bin/activate
# The `vllm serve` test starts a second engine (about 90 s): on by default, off with RAGSFT_TEST_SERVE=0.
export RAGSFT_TEST_SERVE="${RAGSFT_TEST_SERVE:-1}"
export RAGSFT_HOME="${RAGSFT_TEST_HOME:-$(mktemp -d)}"
ruff check ragsft_assets ragsft_assets_tests
ruff format --check ragsft_assets ragsft_assets_tests
# -rs: the skip summary names each skip's reason (a missing Chromium or second engine is said, not hidden).
python -m pytest -q -rs -p no:cacheprovider "$@"
