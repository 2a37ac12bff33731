#!/usr/bin/env bash
# s_backward_op.py before (the tree given as $1, built in place) and after (this tree), three alternations at 1 and
# 2 threads, every other job of the machine stopped. Writes op.txt beside this script.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
after="$(cd "$here/../../../.." && pwd)"
before="$(cd "$1" && pwd)"
shapes=(4x960x4x4 4x1280x4x4 4x960x1x1 2x320x3x5 16x64x6x6 2x512x7x7 16x256x7x7 16x512x7x7 16x2048x7x7 4x384x8x8)
for threads in 1 2; do
  for round in 1 2 3; do
    for side in before after; do
      dir=$after; [ "$side" = before ] && dir=$before
      echo "== $threads thread(s), round $round, $side"
      PYTHONPATH="$dir" python "$here/s_backward_op.py" "$threads" "${shapes[@]}" 2>/dev/null
    done
  done
done > "$here/op.txt"
