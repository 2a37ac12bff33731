# The exploration behind group_rows (2026-12-01, on 74166f6 with group_sizes.patch applied): one library per
# (MG, OG, BG), then alternating rounds of group_sizes_time.py; outputs group_sizes_rounds1.jsonl (3 rounds,
# 8 builds) and group_sizes_rounds2.jsonl (3 rounds, builds 444, 114 and 111), summarized by
# `python group_sizes_summary.py FILE`.
set -e
out=${OUT:-/tmp/group_sizes}
mkdir -p "$out"
for v in "4 4 4" "1 1 4" "4 1 4" "1 4 4" "2 2 4" "4 2 4" "4 4 1" "4 4 2" "1 1 1"; do
  set -- $v
  CFLAGS="-DMG=$1 -DOG=$2 -DBG=$3" python setup.py build_ext --inplace > "$out/build.log" 2>&1
  cp evonorm_core/ops/_C*.so "$out/v_$1$2$3.so"
done
for r in 1 2 3; do for v in 444 114 414 144 224 424 441 442; do
  PYTHONPATH=. python "$(dirname "$0")/group_sizes_time.py" "$out/v_$v.so" 16x256x56x56 16x512x28x28 16x1024x14x14 \
    4x96x64x64 4x144x32x32 >> "$out/rounds1.jsonl"
done; done
for r in 1 2 3; do for v in 444 114 111; do
  PYTHONPATH=. python "$(dirname "$0")/group_sizes_time.py" "$out/v_$v.so" 4x256x56x56 32x96x64x64 64x96x32x32 \
    >> "$out/rounds2.jsonl"
done; done
