#!/bin/bash
# probe.py three times for each tree, alternated: BEFORE (a worktree of the parent commit, with this tree's built
# C++ extension copied in: the change is Python alone) and this tree. From the repository root:
#   bash docs/results/kernel_probes/layer_host_cost/run.sh /tmp/before > docs/results/kernel_probes/layer_host_cost/runs.jsonl
set -e
before=$1
for run in 1 2 3; do
  PYTHONPATH="$before" python docs/results/kernel_probes/layer_host_cost/probe.py
  PYTHONPATH="$PWD" python docs/results/kernel_probes/layer_host_cost/probe.py
done
