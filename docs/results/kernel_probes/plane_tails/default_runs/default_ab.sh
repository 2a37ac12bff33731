#!/usr/bin/env bash
# The default run of tools/benchmark_layers.py (every layer, four stages, model steps), before (the tree given as
# $1, built in place) and after (this tree), three alternations, each side importing its own tree; every other job
# of the machine stopped. Writes ab_{before,after}_<round>.json beside this script (a later probe sets another
# folder: OUT; ARGS adds arguments, e.g. ARGS=--matrix for the matrix); summary.py prints the default runs' ranges.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
after="$(cd "$here/../../../../.." && pwd)"
before="$(cd "$1" && pwd)"
out="$(cd "${OUT:-$here}" && pwd)"
for round in 1 2 3; do
  for side in before after; do
    dir=$after; [ "$side" = before ] && dir=$before
    (cd "$dir" && PYTHONPATH="$dir" python tools/benchmark_layers.py ${ARGS:-} --json "$out/ab_${side}_$round.json" --plot '') \
      > /dev/null 2>&1
  done
done
