#!/usr/bin/env bash
# tests/bench.sh (make bench): the sgemm peak of this machine, then meshmoe, PyTorch eager
# and JAX jit on the -small presets, side by side (tests/bench.py says what and how).
# The peers need `make bench-peers` (.venv-peers); without it their rows say so.
set -u
cd "$(dirname "$0")/.."
exec python3 tests/bench.py
