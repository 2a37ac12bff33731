"""Draw one training image per class of the embedded MNIST digits and each of their variations.

    python docs/results/classification/table3_harder_digits/samples.py docs/results/classification/table3_harder_digits/samples.png
"""
from __future__ import annotations

import argparse
from pathlib import Path

from evonorm_core.experiment import data
from evonorm_core.experiment.tables import pyplot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("png", type=Path, help="where to write the figure")
    args = parser.parse_args()
    plt = pyplot()
    rows = (None, *data.MNIST_VARIATIONS)
    fig, axes = plt.subplots(len(rows), 10, figsize=(10, 1.15 * len(rows)))
    for row, variation in zip(axes, rows):
        split = data.mnist(variation=variation)
        for label, ax in enumerate(row):
            first = int((split.train_labels == label).nonzero()[0, 0])
            ax.imshow(split.train_images[first, 0], cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([]), ax.set_yticks([])
        row[0].set_ylabel("mnist" if variation is None else f"mnist-{variation}", fontsize=7, rotation=0, ha="right")
    fig.suptitle("--data: the first training digit of each class", fontsize=9)
    fig.savefig(args.png, dpi=90, bbox_inches="tight")
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
