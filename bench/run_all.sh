#!/usr/bin/env bash
# The benchmarks, end to end, on a fresh machine: bash bench/run_all.sh [--tiny] [--no-ragas]
# Creates bench/.venv with the project (unless PYTHON names an interpreter that has it), then
# runs bench/run_all.py, which creates bench/.ragas-venv (ragas==0.4.3) on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ ! -x bench/.venv/bin/python ]; then
    python3 -m venv bench/.venv
    bench/.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
  fi
  PYTHON=bench/.venv/bin/python
fi
exec "$PYTHON" bench/run_all.py "$@"
