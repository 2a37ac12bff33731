"""Fig. 11: MobileNetV2 x {0.9, 1.0, 1.1} with BN-ReLU vs EvoNorm-B0, params and inference FLOPs.

    python classification/tradeoff.py count                  # params + fvcore FLOPs, markdown
    python classification/tradeoff.py plot RUNS_DIR          # accuracy vs params / FLOPs PNG

FLOPs are counted by fvcore on the inference model with everything foldable folded:

* BN (+ReLU) after a convolution folds into the convolution's weight and bias (only the
  ReLU remains);
* a norm-act layer with ``nonlinearity=False`` (BN, or an EvoNorm's affine ``x*gamma+beta``)
  folds the same way;
* EvoNorm-B0 with its nonlinearity cannot fold backwards (its ``max`` mixes the running and
  per-sample std), but its ``gamma`` folds forward into a following 1x1 or depthwise
  convolution and its ``beta`` into a following 1x1 convolution (a padded depthwise
  convolution would see ``beta`` at the borders, so it stays).

fvcore counts one multiply-add per convolution/linear MAC; the elementwise operations of
the remaining norm-act layers (ReLU; B0's instance variance, ``v1*x+s``, ``max``, divide,
affine) are counted as one FLOP per output element, and reductions as one per input
element, for both layers alike.
"""
from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch
from torch import Tensor, nn

from evonorm_core import EvoNormB0, NormAct2d
from evonorm_core.classifiers.models import build_model
from evonorm_core.experiment.arguments import output_file
from evonorm_core.experiment.files import CorruptFileError
from evonorm_core.experiment.library_warnings import ignore_jit_script_deprecation
from evonorm_core.experiment.tables import pyplot, save_figure
from evonorm_suite.classification.tables import shell_line, torchrun
from evonorm_suite.classification.train import read_result

WIDTHS = (0.9, 1.0, 1.1)
LAYERS = ("bn_relu", "evonorm_b0")
# The only Fig. 11 points the paper gives as numbers: MobileNetV2 1.0x in Table 2.
PAPER_TOP1 = {("bn_relu", 1.0): 73.1, ("evonorm_b0", 1.0): 75.1}
ELEMENTWISE_OPS = ("aten::add", "aten::add_", "aten::mul", "aten::div", "aten::maximum", "aten::sqrt",
                   "aten::relu", "aten::relu_", "aten::sigmoid", "aten::sub")
REDUCTION_OPS = ("aten::var", "aten::mean")


class SplitAffine(nn.Module):
    """``norm(x) [* gamma] [+ beta]``: an eval-mode norm-act layer whose ``gamma``/``beta`` were
    taken out of it so they can be folded into the convolution that follows."""

    def __init__(self, layer: NormAct2d) -> None:
        super().__init__()
        gamma, beta = layer.weight.detach().clone(), layer.bias.detach().clone()
        self.norm = copy.deepcopy(layer).eval()
        self.norm.weight = self.norm.bias = None  # the same layer without its affine
        if hasattr(self.norm, "impl"):
            self.norm.impl = "reference"  # plain tensor ops, which fvcore counts
        self.register_buffer("gamma", gamma.view(1, -1, 1, 1))
        self.register_buffer("beta", beta.view(1, -1, 1, 1))
        self.has_gamma = self.has_beta = True

    def forward(self, x: Tensor) -> Tensor:
        out = self.norm(x)
        if self.has_gamma:
            out = out * self.gamma
        return out + self.beta if self.has_beta else out


def _affine_of(layer: nn.Module) -> tuple[Tensor, Tensor, nn.Module] | None:
    """``(scale, shift, what remains)`` if ``layer`` is, in eval mode, an affine plus an activation
    (the layer's own :meth:`~evonorm_core.NormAct2d.folded_affine`)."""
    folded = layer.folded_affine() if isinstance(layer, NormAct2d) else None
    return None if folded is None else (*folded, layer.activation_module())


def _fold_into_conv(conv: nn.Conv2d, scale: Tensor, shift: Tensor) -> None:
    """``conv(x) * scale + shift`` as one convolution (per output channel)."""
    with torch.no_grad():
        conv.weight.mul_(scale.view(-1, 1, 1, 1))
        bias = conv.bias.detach() * scale if conv.bias is not None else torch.zeros_like(shift)
        conv.bias = nn.Parameter(bias + shift)


def _fold_forward(norm: SplitAffine, conv: nn.Conv2d) -> None:
    """Fold ``gamma`` (1x1 or depthwise) and ``beta`` (1x1 only) into the convolution after ``norm``."""
    depthwise = conv.groups == conv.in_channels == conv.out_channels
    pointwise = conv.kernel_size == (1, 1) and conv.groups == 1
    if not (depthwise or pointwise) or bool((norm.gamma == 0).any()):
        return
    with torch.no_grad():
        if pointwise:
            shift = conv.weight.sum(dim=(2, 3)) @ norm.beta.view(-1)
            conv.bias = nn.Parameter((conv.bias.detach() if conv.bias is not None else 0) + shift)
            norm.has_beta = False
        gamma = norm.gamma.view(-1)
        conv.weight.mul_(gamma.view(-1, 1, 1, 1) if depthwise else gamma.view(1, -1, 1, 1))
        norm.beta.div_(norm.gamma)  # the norm now emits y + beta / gamma, scaled back by the conv
        norm.has_gamma = False


def fold_for_inference(model: nn.Module) -> nn.Module:
    """A copy of ``model`` in eval mode with every foldable norm-act folded (see module docstring).

    Folding happens between neighbours in an ``nn.Sequential`` (where the MBConv models put
    every convolution and its norm-act).
    """
    model = copy.deepcopy(model).eval()
    for seq in [m for m in model.modules() if isinstance(m, nn.Sequential)]:
        for i in range(len(seq)):
            layer = seq[i]
            if isinstance(layer, EvoNormB0) and layer.nonlinearity:
                seq[i] = SplitAffine(layer)
                continue
            affine = _affine_of(layer)
            if affine is not None and i > 0 and isinstance(seq[i - 1], nn.Conv2d):
                _fold_into_conv(seq[i - 1], affine[0], affine[1])
                seq[i] = affine[2]
        for i in range(len(seq) - 1):
            if isinstance(seq[i], SplitAffine) and isinstance(seq[i + 1], nn.Conv2d):
                _fold_forward(seq[i], seq[i + 1])
    return model


def count_flops(model: nn.Module, resolution: int = 224) -> int:
    """fvcore FLOPs of one ``resolution``-sized image through ``model`` (MACs + elementwise ops)."""
    # fvcore (the classification extra) is imported here, not at the top, so that `--help` and the
    # plot need neither the library nor the deprecation warning its import raises.
    ignore_jit_script_deprecation()
    from fvcore.nn import FlopCountAnalysis
    from fvcore.nn.jit_handles import elementwise_flop_counter

    analysis = FlopCountAnalysis(model, torch.zeros(1, 3, resolution, resolution))
    for op in ELEMENTWISE_OPS:
        analysis.set_op_handle(op, elementwise_flop_counter(0, 1))
    for op in REDUCTION_OPS:
        analysis.set_op_handle(op, elementwise_flop_counter(1, 0))
    analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    return int(analysis.total())


def tradeoff_rows(resolution: int = 224) -> list[dict]:
    """Params (training model) and folded inference FLOPs for each layer and width."""
    rows = []
    for layer in LAYERS:
        for width in WIDTHS:
            model = build_model("mobilenetv2", layer, width_multiplier=width).eval()
            folded = fold_for_inference(model)
            rows.append({"layer": layer, "width": width,
                         "params": sum(p.numel() for p in model.parameters()),
                         "flops": count_flops(folded, resolution)})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| layer | width | params (M) | inference GFLOPs | paper top-1 |", "|---|---|---|---|---|"]
    for r in rows:
        paper = PAPER_TOP1.get((r["layer"], r["width"]))
        lines.append(f"| {r['layer']} | {r['width']} | {r['params'] / 1e6:.3f} | "
                     f"{r['flops'] / 1e9:.4f} | {'-' if paper is None else paper} |")
    return "\n".join(lines)


def measured_top1(runs_dir: Path) -> dict[tuple[str, float], float]:
    """``(layer, width) -> final top-1`` from ``RUNS_DIR/<layer>/w<width>/result.json``."""
    found = {}
    for path in sorted(runs_dir.glob("*/w*/result.json")):
        result = read_result(path, advice="delete it and train that point again",
                             config_keys=("norm_act", "width_multiplier"))
        found[(result["config"]["norm_act"], result["config"]["width_multiplier"])] = result["final_top1"]
    return found


def plot(rows: list[dict], top1: dict[tuple[str, float], float], path: Path) -> None:
    """Accuracy vs params and vs FLOPs, one line per layer (Fig. 11)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, unit in ((axes[0], "params", 1e6), (axes[1], "flops", 1e9)):
        for i, layer in enumerate(LAYERS):
            points = [(r[key] / unit, top1[(layer, r["width"])]) for r in rows
                      if r["layer"] == layer and (layer, r["width"]) in top1]
            if points:
                ax.plot(*zip(*points), "o-", color=f"C{i}", label=layer)
        ax.set_xlabel("params (M)" if key == "params" else "inference GFLOPs (folded)")
        ax.set_ylabel("top-1 (%)")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
    fig.suptitle("MobileNetV2 x {0.9, 1.0, 1.1}")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python classification/tradeoff.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    count = sub.add_parser("count", help="params and folded inference FLOPs as markdown, plus the training commands")
    draw = sub.add_parser("plot", help="accuracy vs params / FLOPs from trained runs")
    draw.add_argument("runs_dir", help="folder with <layer>/w<width>/result.json (see `count`'s commands)")
    draw.add_argument("--png", type=output_file, help="output file (default RUNS_DIR/fig11.png)")
    for command in (count, draw):
        command.add_argument("--resolution", type=int, default=224, help="input size for FLOPs (default %(default)s)")
    args = p.parse_args(argv)
    if args.resolution < 1:
        p.error(f"--resolution must be >= 1, got {args.resolution}")
    measured = finished_runs(Path(args.runs_dir)) if args.command == "plot" else {}  # before minutes of counting
    rows = tradeoff_rows(args.resolution)
    print(markdown(rows))
    if args.command == "count":
        print("\nImageNet training, one run per point (32 workers as the paper; run each command on every node, "
              "MASTER_ADDR the first node's address; add --resume to continue a stopped run):")
        for layer in LAYERS:
            for width in WIDTHS:
                launch = torchrun(32, f"fig11-{layer}-w{width}")
                print(f"{shell_line(launch)} -m evonorm_suite.classification.train --model mobilenetv2 --norm-act "
                      f"{layer} --width-multiplier {width} --data imagenet --data-dir $IMAGENET "
                      f"--output-dir runs/fig11/{layer}/w{width}")
        return
    png = Path(args.png or Path(args.runs_dir) / "fig11.png")
    plot(rows, measured, png)
    print(f"plot: {png}")


def finished_runs(runs_dir: Path) -> dict:
    """:func:`measured_top1` of ``runs_dir``; exits with one error line if it holds no finished run or a damaged one."""
    if not runs_dir.is_dir():
        raise SystemExit(f"error: runs directory {str(runs_dir)!r} does not exist")
    try:
        measured = measured_top1(runs_dir)
    except CorruptFileError as error:
        raise SystemExit(f"error: {error}") from None
    if not measured:
        raise SystemExit(f"error: no finished run in {str(runs_dir)!r} (<layer>/w<width>/result.json): train the "
                         "points first (the commands of `count`)")
    return measured


if __name__ == "__main__":
    main()
