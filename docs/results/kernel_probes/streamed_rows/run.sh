# Alternating rounds of ops_time.py for two kernel libraries (before, after), float32 and bfloat16:
#   [SHAPES="..."] bash docs/results/kernel_probes/streamed_rows/run.sh BEFORE.so AFTER.so OUT.jsonl [ROUNDS]
set -e
dir=$(dirname "$0")
shapes="${SHAPES:-16x256x56x56 16x512x28x28 16x1024x14x14 16x2048x7x7 4x256x56x56 4x96x64x64 4x144x32x32 32x96x64x64 64x96x32x32}"
for round in $(seq "${4:-3}"); do
  for so in "$1" "$2"; do
    for dtype in float32 bfloat16; do
      DTYPE=$dtype PYTHONPATH=. python "$dir/ops_time.py" "$so" $shapes >> "$3"
    done
  done
done
