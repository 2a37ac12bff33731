#!/bin/bash
# The NCHW B backward on lanes (3dbcfd1) against the kernels before it (0315c52); b_forward (unchanged code) beside it
# as a control.
exec bash docs/results/kernel_probes/ab_runs.sh 0315c52 b_backward,b_forward docs/results/kernel_probes/b_backward_lanes
