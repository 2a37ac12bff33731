#!/usr/bin/env bash
# Probe (not a result: one seed, on a GPU, where the grid runs on CPU): which part of the BN-ReLU
# detector keeps it below GN-ReLU and the no-normalization control in the Table 4 miniature.
# The grid's batch8 run (1800 steps of 8 images, seed 0) for BN-ReLU, GN-ReLU, the control and
# EvoNorm-B0, and BN-ReLU with one thing changed each: no norm in the RPN head (detectron2's
# StandardRPNHead), no norm in the RoI heads (detectron2's conv heads with ReLU), half the LR.
# All run at once on one GPU. Usage (repository root, detectron2 and its dependencies importable,
# or copied into .device_site): OUT=folder bash docs/results/detection/bn_probe/gpu_variants.sh
# Each run is stopped after PROBE_SECONDS (default 470); the summary then reads how far it got.
# PROBE_VARIANTS: the variants to run (default the seven above; bn_precise_bn: BN-ReLU with its moving
# averages recomputed over 50 training batches before each evaluation).
set -u
out=${OUT:?set OUT}
export PYTHONUNBUFFERED=1 EVONORM_JIT=0 DETECTRON2_DATASETS=$PWD/datasets
root=$(mktemp -d) && mkdir "$root/evonorm_suite"
for folder in classification detection gan search; do ln -s "$PWD/$folder" "$root/evonorm_suite/$folder"; done
export PYTHONPATH=$PWD:$root${PYTHONPATH:+:$PYTHONPATH}
[ -d .device_site ] && export PYTHONPATH=$PYTHONPATH:$PWD/.device_site
python -c "import sys, torch, detectron2, pycocotools; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())" || exit 1
python -m evonorm_suite.detection.shapes > /dev/null || exit 1  # the dataset, once, before the runs race for it

common=(SEED 0 MODEL.DEVICE cuda SOLVER.IMS_PER_BATCH 8 SOLVER.BASE_LR 0.02 SOLVER.MAX_ITER 1800
        "SOLVER.STEPS" "(1440, 1674)" SOLVER.WARMUP_ITERS 50 TEST.EVAL_PERIOD 180 SOLVER.CHECKPOINT_PERIOD 100000
        DATALOADER.NUM_WORKERS 0)
variant() {  # variant NAME LAYER [KEY VALUE ...]
    local name=$1 layer=$2; shift 2
    timeout "${PROBE_SECONDS:-470}" python -m evonorm_suite.detection.train_net --threads 1 --config "detection/configs/demo_shapes_$layer.yaml" \
        "${common[@]}" OUTPUT_DIR "runs/gpu_probe/$name" "$@" > "runs/gpu_probe/$name.log" 2>&1
    echo "$name: exit $?"
}
mkdir -p runs/gpu_probe
declare -A variants=(
    [bn]="bn" [gn]="gn" [no_norm_relu]="no_norm_relu" [evonorm_b0]="evonorm_b0"
    [bn_plain_rpn_head]="bn MODEL.RPN.HEAD_NAME StandardRPNHead"
    [bn_plain_roi_heads]="bn MODEL.ROI_BOX_HEAD.NAME FastRCNNConvFCHead MODEL.ROI_BOX_HEAD.NORM \"\" MODEL.ROI_MASK_HEAD.NAME MaskRCNNConvUpsampleHead MODEL.ROI_MASK_HEAD.NORM \"\""
    [bn_half_lr]="bn SOLVER.BASE_LR 0.01"
    [bn_precise_bn]="bn TEST.PRECISE_BN.ENABLED True TEST.PRECISE_BN.NUM_ITER 50"
)
for name in ${PROBE_VARIANTS:-bn gn no_norm_relu evonorm_b0 bn_plain_rpn_head bn_plain_roi_heads bn_half_lr}; do
    [[ -n ${variants[$name]:-} ]] || { echo "unknown variant '$name'; accepted: ${!variants[*]}" >&2; exit 2; }
    # shellcheck disable=SC2086  # the variant's layer and KEY VALUE pairs, split on spaces
    variant "$name" ${variants[$name]} &
done
wait
python - "$out" <<'EOF'
import json, sys
from pathlib import Path
rows = {}
for run in sorted(Path("runs/gpu_probe").iterdir()):
    if not run.is_dir() or not (run / "metrics.json").exists():
        continue
    records = [json.loads(line) for line in (run / "metrics.json").read_text().splitlines() if line.strip()]
    evals = [(r["iteration"], r["bbox/AP"], r["segm/AP"]) for r in records if "bbox/AP" in r]
    losses = [(r["iteration"], r["total_loss"], r.get("loss_rpn_cls")) for r in records if "total_loss" in r]
    rows[run.name] = {"evaluations": evals, "last_losses": losses[-3:]}
    print(f"{run.name:20s} last box/mask AP {evals[-1][1:] if evals else '-'} after {evals[-1][0] if evals else '-'} "
          f"steps; box AP curve {[round(e[1], 1) for e in evals]}; last loss {losses[-1][1:] if losses else '-'}")
Path(sys.argv[1], "gpu_variants.json").write_text(json.dumps(rows, indent=1))
EOF
tar czf "$out/gpu_probe_logs.tar.gz" runs/gpu_probe/*.log
