#!/usr/bin/env python3
"""Train or evaluate Mask R-CNN with EvoNorms in detectron2: see ``detection/train_net.py`` (``--help``)."""
import sys

from evonorm_suite.detection.train_net import main

if __name__ == "__main__":
    sys.exit(main())
