"""Benchmarks the normalization-activation layers (eager and compiled) and the ResNet-50 training step.

A shim: the logic is evonorm_core.benchmark (``python tools/benchmark_layers.py --help``).
"""
import sys

from evonorm_core.benchmark import main

if __name__ == "__main__":
    sys.exit(main())
