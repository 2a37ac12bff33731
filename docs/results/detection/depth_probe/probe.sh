#!/usr/bin/env bash
# Depth probe for the Table 4 miniature (docs/detection.md): the grid's batch8 command for seed 0 of BN-ReLU,
# the no-normalization control and GN-ReLU, with a half-width ResNet-50 backbone (stem 32, res2 128, bottleneck
# width 32) in place of the half-width ResNet-18. One seed each: a probe, not a result.
set -euo pipefail
RUNS=${1:-runs/det_probe_r50}
DEPTH_OPTS="MODEL.RESNETS.DEPTH 50 MODEL.RESNETS.RES2_OUT_CHANNELS 128 MODEL.RESNETS.WIDTH_PER_GROUP 32"
mkdir -p "$RUNS"
python -m evonorm_suite.detection.train_net --threads 1 --config detection/configs/demo_shapes_bn.yaml SEED 0 SOLVER.IMS_PER_BATCH 8 SOLVER.BASE_LR 0.02 SOLVER.MAX_ITER 1800 SOLVER.STEPS '(1440, 1674)' SOLVER.WARMUP_ITERS 50 TEST.EVAL_PERIOD 180 SOLVER.CHECKPOINT_PERIOD 180 SOLVER.CHECKPOINTS_KEPT 1 DATALOADER.NUM_WORKERS 0 OUTPUT_DIR "$RUNS"/14400_images/batch8/bn/seed0 $DEPTH_OPTS > "$RUNS/bn.log" 2>&1 &
python -m evonorm_suite.detection.train_net --threads 1 --config detection/configs/demo_shapes_no_norm_relu.yaml SEED 0 SOLVER.IMS_PER_BATCH 8 SOLVER.BASE_LR 0.02 SOLVER.MAX_ITER 1800 SOLVER.STEPS '(1440, 1674)' SOLVER.WARMUP_ITERS 50 TEST.EVAL_PERIOD 180 SOLVER.CHECKPOINT_PERIOD 180 SOLVER.CHECKPOINTS_KEPT 1 DATALOADER.NUM_WORKERS 0 OUTPUT_DIR "$RUNS"/14400_images/batch8/no_norm_relu/seed0 $DEPTH_OPTS > "$RUNS/no_norm_relu.log" 2>&1 &
wait
python -m evonorm_suite.detection.train_net --threads 1 --config detection/configs/demo_shapes_gn.yaml SEED 0 SOLVER.IMS_PER_BATCH 8 SOLVER.BASE_LR 0.02 SOLVER.MAX_ITER 1800 SOLVER.STEPS '(1440, 1674)' SOLVER.WARMUP_ITERS 50 TEST.EVAL_PERIOD 180 SOLVER.CHECKPOINT_PERIOD 180 SOLVER.CHECKPOINTS_KEPT 1 DATALOADER.NUM_WORKERS 0 OUTPUT_DIR "$RUNS"/14400_images/batch8/gn/seed0 $DEPTH_OPTS > "$RUNS/gn.log" 2>&1
