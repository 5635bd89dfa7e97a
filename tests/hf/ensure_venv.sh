#!/usr/bin/env bash
# tests/hf/ensure_venv.sh: create .venv-hf on first use and install the pinned torch +
# transformers stack (tests/hf/requirements.txt). Prints the venv's python on success; on
# failure prints the reason as its last line on stderr and exits 1 (make test then reports
# SKIPPED). PyPI's x86-64 torch wheel is its CUDA build (the CPU-only wheels are not on
# PyPI): with the CUDA libraries it needs to load, the first install downloads about 3 GB,
# takes about 5 minutes here and leaves 5.6 GB in .venv-hf; torch then runs on the CPU.
set -u
cd "$(dirname "$0")/../.."
REQ=tests/hf/requirements.txt
PY=.venv-hf/bin/python
stamp=.venv-hf/.requirements-installed
if [ -x "$PY" ] && [ -f "$stamp" ] && cmp -s "$REQ" "$stamp"; then echo "$PWD/$PY"; exit 0; fi
command -v python3 >/dev/null || { echo "python3 not found" >&2; exit 1; }
if [ ! -x "$PY" ]; then
    python3 -m venv .venv-hf >&2 || { echo "python3 -m venv failed (install python3-venv)" >&2; exit 1; }
fi
# Byte-compiled at install time, as pip does by default: a machine with
# PYTHONDONTWRITEBYTECODE set (this one) would otherwise compile jax or torch anew in every
# process (make hf-check: 51 s where it takes 21 s).
"$PY" -m pip install --quiet --disable-pip-version-check -r "$REQ" >&2 \
    || { echo "pip could not install $REQ (no network to PyPI?)" >&2; exit 1; }
cp "$REQ" "$stamp"
echo "$PWD/$PY"
