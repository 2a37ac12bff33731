#!/usr/bin/env python3
"""Print MAdds (fvcore, one square image) and parameter counts of configs next to paper Table 4.

    python tools/model_cost.py --config detection/configs/mask_rcnn_R50_*.yaml
    python tools/model_cost.py --config detection/configs/demo_shapes_gn.yaml --image-size 128
"""
from __future__ import annotations

import argparse
import sys

import torch

from detection import load_config
from detection.cost import model_cost
from detection.paper import paper_row
from detection.report import markdown_row, markdown_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", "--config-file", nargs="+", required=True, metavar="FILE", help="config file(s)")
    parser.add_argument(
        "--image-size", type=int, default=1024, help="side of the square input image (default: 1024, the paper's)"
    )
    parser.add_argument("--threads", type=int, default=0, help="CPU threads for torch (default 0: torch's default)")
    parser.add_argument("--show-uncounted", action="store_true", help="also list the ops fvcore did not count")
    parser.add_argument("opts", nargs=argparse.REMAINDER, help="KEY VALUE config overrides, applied to every config")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    size = f"{args.image_size}x{args.image_size}"
    header = [f"config ({size})", "MAdds (B)", "paper MAdds (B)", "Params (M)", "paper Params (M)"]
    print(markdown_table(header, []), flush=True)
    for config_file in args.config:
        cost = model_cost(load_config(config_file, args.opts), args.image_size)
        paper = paper_row(config_file)
        row = [
            config_file,
            f"{cost.madds_b:.1f}",
            f"{paper.madds_b:.1f}" if paper else "-",
            f"{cost.params_m:.2f}",
            f"{paper.params_m:.2f}" if paper else "-",
        ]
        print(markdown_row(row), flush=True)  # one row per config as soon as it is counted
        if args.show_uncounted:
            print(f"{config_file}: not counted by fvcore: {cost.uncounted_ops}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
