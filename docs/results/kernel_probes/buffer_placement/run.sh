#!/usr/bin/env bash
# Three processes per shape, one after another, every other job of the machine stopped; writes runs.txt here.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for shape in 16x2048x7x7 4x2048x7x7; do
  for run in 1 2 3; do python "$here/probe.py" "$shape"; done
done > "$here/runs.txt"
