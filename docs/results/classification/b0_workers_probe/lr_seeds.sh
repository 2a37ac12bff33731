#!/usr/bin/env bash
# EvoNorm-B0 at 8 x 32 images with the peak LR halved (0.05) and quartered (0.025), and BN-ReLU at the quartered LR
# beside it, on 5 seeds each, two one-thread runs at a time: each run's per-epoch validation loss / top-1 beside the
# grid's LR 0.1 run of its layer and seed goes to [bn_relu_]8x32_lr<LR>_seed<N>.txt, its configuration to
# [bn_relu_]8x32_lr<LR>_seed<N>_config.json. Runs whose .txt exists are skipped (seed 0 of B0 at LR 0.05 is the
# earlier one-seed probe); then summarize_lr_seeds.py writes lr_seeds.json. Run from the repository root:
#     bash docs/results/classification/b0_workers_probe/lr_seeds.sh [WORK_DIR]
set -euo pipefail
here=docs/results/classification/b0_workers_probe
work=${1:-runs/b0_workers_probe}
for run in "EvoNorm-B0 0.05" "EvoNorm-B0 0.025" "BN-ReLU 0.025"; do
    read -r layer lr <<< "$run"
    prefix=$([ "$layer" = BN-ReLU ] && echo bn_relu_ || true)
    for seed in 0 1 2 3 4; do
        [ -e "$here/${prefix}8x32_lr${lr}_seed${seed}.txt" ] || echo "$layer $lr $seed ${prefix}8x32_lr${lr}"
    done
done | xargs -r -P 2 -L 1 bash -c '
    layer=$0 lr=$1 seed=$2 name=$3_seed$2 out='"$work"'/$3
    python '"$here"'/probe.py "$seed" "$out" --layer "$layer" --base-lr "$lr" > '"$here"'/$name.txt.partial &&
    cp "$out/seed$seed/config.json" '"$here"'/${name}_config.json &&
    mv '"$here"'/$name.txt.partial '"$here"'/$name.txt'
python "$here/summarize_lr_seeds.py"
