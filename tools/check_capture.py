"""Converts torchvision ResNet-50 to each EvoNorm and checks torch.compile, torch.export, ONNX, jit.trace and fx against eager.

A shim: the logic is evonorm_core.capture (``python tools/check_capture.py --help``).
"""
import sys

from evonorm_core.capture import main

if __name__ == "__main__":
    sys.exit(main())
