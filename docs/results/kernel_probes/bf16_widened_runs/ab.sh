#!/usr/bin/env bash
# bfloat16 planes under 64 values widened to float32 a run at a time (on_run in csrc/evonorm_ops.cpp): the B
# operators of a tree without it (its path, built in place) against this tree, alternating, three rounds, every
# other job of the machine stopped, then the medians of the rounds:
#   git worktree add --detach /tmp/before <commit before> && (cd /tmp/before && python setup.py build_ext --inplace)
#   bash docs/results/kernel_probes/bf16_widened_runs/ab.sh /tmp/before > docs/results/kernel_probes/bf16_widened_runs/ab.txt
#   bash docs/results/kernel_probes/bf16_widened_runs/ab.sh /tmp/before s_forward,s_backward > .../ab_s.txt
# (the second argument: the operators timed, op_times.py's names; default the B series')
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
main="$(cd "$here/../../../.." && pwd)"
before="$(cd "$1" && pwd)"
ops=${2:-b_forward,b_inference,b_backward}
shapes=(16x2048x7x7 2x2048x7x7 16x1024x14x14 16x512x28x28)
out="$(mktemp -d)"
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(lscpu | grep 'Model name' | sed 's/ \+/ /g'), before: $(git -C "$before" rev-parse --short HEAD)"
for round in 1 2 3; do
  for side in before after; do
    dir=$main; [ $side = before ] && dir=$before
    (cd "$dir" && PYTHONPATH="$dir" python "$here/op_times.py" "$out/${side}_$round.json" bfloat16 "$ops" "${shapes[@]}")
  done
done
python - "$out" <<'PY'
import glob, json, statistics, sys
def medians(side):
    runs = [json.load(open(p)) for p in sorted(glob.glob(f"{sys.argv[1]}/{side}_*.json"))]
    return {k: {op: statistics.median(r[k][op] for r in runs) for op in runs[0][k]} for k in runs[0]}
before, after = medians("before"), medians("after")
print("microseconds per call, before -> after (ratio); medians of 3 rounds")
for k in before:
    print(k.ljust(24), "  ".join(f"{op} {before[k][op]:7.1f} -> {after[k][op]:7.1f} ({after[k][op] / before[k][op]:.2f})"
                                 for op in before[k]))
PY
