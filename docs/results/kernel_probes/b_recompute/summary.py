"""B0's fwd+bwd / BN-ReLU's (same run) per shape and layout, statistics saved vs recomputed (ab.sh's JSON)."""
import json
import sys
from pathlib import Path

SHAPES = ["16x256x56x56", "16x512x28x28", "16x1024x14x14", "16x2048x7x7"]


def b0_ratio(path: Path, shape: str) -> float:
    rows = json.loads(path.read_text())["layers"]
    return next(r["ratio"] for r in rows if r["layer"] == "evonorm_b0 (fused)" and not r["compiled"]
                and "x".join(map(str, r["shape"])) == shape)


def main(folder: Path) -> None:
    for suffix, layout in (("", "NCHW"), ("_cl", "channels_last")):
        for shape in SHAPES:
            saved = [b0_ratio(folder / f"saved{suffix}_{i}.json", shape) for i in (1, 2)]
            recomputed = [b0_ratio(folder / f"recomputed{suffix}_{i}.json", shape) for i in (1, 2)]
            print(layout, shape, "saved: x BN-ReLU", " ".join(f"{r:.2f}" for r in saved),
                  "| recomputed:", " ".join(f"{r:.2f}" for r in recomputed),
                  "| ratio change", " ".join(f"{b / a:.2f}" for a, b in zip(saved, recomputed)))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
