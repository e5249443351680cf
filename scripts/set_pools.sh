#!/usr/bin/env bash
# Set the concurrency pools of the Dagster instance at $DAGSTER_HOME (default $RAGSFT_HOME/dagster or
# ./.ragsft/dagster). dagster.yaml can only give a default limit to every pool; this names each one.
#   gpu:    1 per GPU on the machine (RAGSFT_GPU_SLOTS overrides; 1 when no GPU is seen)
#   duckdb: 1 (DuckDB takes one writer at a time)
set -euo pipefail
cd "$(dirname "$0")/.."
DAGSTER=${DAGSTER:-.venv/bin/dagster}
command -v "$DAGSTER" >/dev/null 2>&1 || DAGSTER=dagster
export DAGSTER_HOME="${DAGSTER_HOME:-${RAGSFT_HOME:-$PWD/.ragsft}/dagster}"
mkdir -p "$DAGSTER_HOME"
[ -f "$DAGSTER_HOME/dagster.yaml" ] || cp dagster.yaml "$DAGSTER_HOME/dagster.yaml"
if [ -z "${RAGSFT_GPU_SLOTS:-}" ]; then
  RAGSFT_GPU_SLOTS=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
  [ "$RAGSFT_GPU_SLOTS" -ge 1 ] 2>/dev/null || RAGSFT_GPU_SLOTS=1
fi
"$DAGSTER" instance concurrency set gpu "$RAGSFT_GPU_SLOTS"
"$DAGSTER" instance concurrency set duckdb 1
echo "set_pools: gpu=$RAGSFT_GPU_SLOTS duckdb=1 in $DAGSTER_HOME"
