#!/usr/bin/env bash
# Depth probe for the Table 4 miniature (docs/detection.md): detection/miniature.py's batch8 command for seed 0,
# with a half-width ResNet-50 backbone (stem 32, res2 128, bottleneck width 32) in place of the half-width
# ResNet-18. One seed each: a probe, not a result.
#   bash docs/results/detection/depth_probe/probe.sh [STEPS [LAYER ...]]   (default: 1800 bn no_norm_relu gn)
# Two runs at a time, one thread each; each run's output goes to runs/det_probe_r50/<layer>_<STEPS>.log.
set -euo pipefail
STEPS=${1:-1800}
shift || true
if (($#)); then LAYERS=("$@"); else LAYERS=(bn no_norm_relu gn); fi
RUNS=${RUNS:-runs/det_probe_r50}
mkdir -p "$RUNS"
run() {  # $1 = layer; the schedule of detection/miniature.py's Run.command at 8 images per step
    local period=$((STEPS / 10))
    python -m evonorm_suite.detection.train_net --threads 1 --config "detection/configs/demo_shapes_$1.yaml" \
        SEED 0 SOLVER.IMS_PER_BATCH 8 SOLVER.BASE_LR 0.02 SOLVER.MAX_ITER "$STEPS" \
        SOLVER.STEPS "($((STEPS * 80 / 100)), $((STEPS * 93 / 100)))" SOLVER.WARMUP_ITERS 50 \
        TEST.EVAL_PERIOD "$period" SOLVER.CHECKPOINT_PERIOD "$period" SOLVER.CHECKPOINTS_KEPT 1 \
        DATALOADER.NUM_WORKERS 0 OUTPUT_DIR "$RUNS/$((STEPS * 8))_images/batch8/$1/seed0" \
        MODEL.RESNETS.DEPTH 50 MODEL.RESNETS.RES2_OUT_CHANNELS 128 MODEL.RESNETS.WIDTH_PER_GROUP 32 \
        > "$RUNS/$1_$STEPS.log" 2>&1
}
export -f run
export STEPS RUNS
printf '%s\n' "${LAYERS[@]}" | xargs -P 2 -I{} bash -c 'run {}'
