#!/usr/bin/env bash
# s_backward_min.py before (the tree given as $1, built in place) and after (this tree), five alternations, every
# other job of the machine stopped. Writes op.txt beside this script.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
after="$(cd "$here/../../../.." && pwd)"
before="$(cd "$1" && pwd)"
shapes=(1x2048x7x7 1x1024x8x8 1x1024x14x14 1x256x28x28 1x64x56x56)
for round in 1 2 3 4 5; do
  for side in before after; do
    dir=$after; [ "$side" = before ] && dir=$before
    echo "$side $(PYTHONPATH="$dir" python "$here/s_backward_min.py" "${shapes[@]}" 2>/dev/null)"
  done
done > "$here/op.txt"
