#!/usr/bin/env bash
# tests/parity/ensure_venv.sh: create .venv on first use and install the pinned JAX stack
# (tests/parity/requirements.txt). Prints the venv's python on success; on failure prints
# the reason as its last line on stderr and exits 1 (make test then reports SKIPPED).
set -u
cd "$(dirname "$0")/../.."
REQ=tests/parity/requirements.txt
PY=.venv/bin/python
stamp=.venv/.requirements-installed
if [ -x "$PY" ] && [ -f "$stamp" ] && cmp -s "$REQ" "$stamp"; then echo "$PWD/$PY"; exit 0; fi
command -v python3 >/dev/null || { echo "python3 not found" >&2; exit 1; }
if [ ! -x "$PY" ]; then
    python3 -m venv .venv >&2 || { echo "python3 -m venv failed (install python3-venv)" >&2; exit 1; }
fi
# Byte-compiled at install time, as pip does by default: a machine with
# PYTHONDONTWRITEBYTECODE set (this one) would otherwise compile jax or torch anew in every
# process (make parity: 281 s where it takes 211 s).
"$PY" -m pip install --quiet --disable-pip-version-check -r "$REQ" >&2 \
    || { echo "pip could not install $REQ (no network to PyPI?)" >&2; exit 1; }
cp "$REQ" "$stamp"
echo "$PWD/$PY"
