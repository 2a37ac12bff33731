#!/usr/bin/env bash
# The S operators alone, one thread, the minimum of 400 calls (../s_plane_pairs/s_backward_min.py), before (the
# tree given as $1, built in place) and after (this tree), five alternations, every other job of the machine
# stopped: the planes the change touches (7x7, 4x4, from 4 samples), and as controls 1x2048x7x7 and 1x1024x8x8,
# whose paths it leaves as they were. Writes op_min.txt beside this script; a later probe sets other shapes
# (SHAPES, space-separated) and another folder (OUT).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
after="$(cd "$here/../../../.." && pwd)"
before="$(cd "$1" && pwd)"
read -r -a shapes <<< "${SHAPES:-1x2048x7x7 4x2048x7x7 16x2048x7x7 4x960x4x4 16x960x4x4 1x1024x8x8}"
out="$(cd "${OUT:-$here}" && pwd)"
for round in 1 2 3 4 5; do
  for side in before after; do
    dir=$after; [ "$side" = before ] && dir=$before
    echo "$side $(PYTHONPATH="$dir" python "$here/../s_plane_pairs/s_backward_min.py" "${shapes[@]}" 2>/dev/null)"
  done
done > "$out/op_min.txt"
