#!/bin/bash
# The NCHW B training forward on lanes (73e4b86) against the kernels before it (81d4bdf); b_inference (unchanged code)
# beside it as a control.
exec bash docs/results/kernel_probes/ab_runs.sh 81d4bdf b_forward,b_inference docs/results/kernel_probes/b_training_forward_lanes
