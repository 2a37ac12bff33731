#!/usr/bin/env python3
"""MAdds and parameters of detection configs next to paper Table 4: see ``detection/cost.py`` (``--help``)."""
import sys

from evonorm_suite.detection.cost import main

if __name__ == "__main__":
    sys.exit(main())
