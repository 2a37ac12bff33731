"""Benchmark normalization-activation layers: forward+backward time and bytes kept for backward.

Per layer and input shape it measures, in one process with interleaved repetitions (the
median after warm-up, so a noisy shared machine shifts all layers alike):

* the time of one forward + backward pass (train mode unless ``--eval``),
* the bytes autograd keeps for backward, counted with ``torch.autograd.graph.saved_tensors_hooks``
  (each stored tensor once), also as a multiple of the input's bytes,

for native PyTorch BN-ReLU, GN-ReLU and GN-SiLU, the composed-op reference EvoNorms
(``impl="reference"``), this suite's fused EvoNorms and timm's ``EvoNorm2dS0``/``EvoNorm2dB0``
when timm is importable. Ratios are against GN-SiLU for the S series and GroupNorm
layers and against BN-ReLU for the B series and BatchNorm layers. A whole-model line then
times one SGD training step of torchvision's ResNet-50 converted to EvoNorm-S0 vs native
GN-ReLU and EvoNorm-B0 vs native BN-ReLU.

    python tools/benchmark_layers.py                       # ResNet-50 stage shapes, batch 16, CPU
    python tools/benchmark_layers.py --shapes 16x64x56x56 --reps 30 --json bench.json
    python tools/benchmark_layers.py --device cuda --dtype bfloat16 --model-batch 8 --model-size 224
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import evonorm_core
from evonorm_core.convert import convert_norm_act

# The bottleneck widths of ResNet-50's four stages at batch 16 (224 x 224 input).
DEFAULT_SHAPES = ["16x64x56x56", "16x128x28x28", "16x256x14x14", "16x512x7x7"]
EVONORMS = ["evonorm_s0", "evonorm_s1", "evonorm_s2", "evonorm_b0", "evonorm_b1", "evonorm_b2"]
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


class NativeNormAct(nn.Sequential):
    """A native PyTorch norm layer followed by an activation (the speed baselines)."""


def native(norm: Callable[[int], nn.Module], act: Callable[[], nn.Module]) -> Callable[[int], nn.Module]:
    return lambda c: NativeNormAct(norm(c), act())


def layer_factories(include_timm: bool) -> dict[str, tuple[Callable[[int], nn.Module], str]]:
    """name -> (factory of num_channels, name of the baseline its ratio is taken against)."""
    layers = {
        "bn_relu (native)": (native(nn.BatchNorm2d, nn.ReLU), "bn_relu (native)"),
        "gn_relu (native)": (native(lambda c: nn.GroupNorm(min(32, c), c), nn.ReLU), "gn_silu (native)"),
        "gn_silu (native)": (native(lambda c: nn.GroupNorm(min(32, c), c), nn.SiLU), "gn_silu (native)"),
    }
    for name in EVONORMS:
        base = "gn_silu (native)" if "_s" in name else "bn_relu (native)"
        for impl in ("reference", "fused"):
            make = evonorm_core.norm_act_factory(name, impl=impl)
            layers[f"{name} ({impl})"] = (make, base)
    if include_timm:
        try:
            from timm.layers import EvoNorm2dB0, EvoNorm2dS0
        except ImportError:
            print("timm is not importable: skipping its EvoNorms", file=sys.stderr)
        else:
            layers["timm EvoNorm2dS0"] = (EvoNorm2dS0, "gn_silu (native)")
            layers["timm EvoNorm2dB0"] = (EvoNorm2dB0, "bn_relu (native)")
    return layers


def parse_shape(text: str) -> tuple[int, int, int, int]:
    try:
        shape = tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        shape = ()
    if len(shape) != 4 or min(shape) <= 0:
        raise argparse.ArgumentTypeError(f"shape {text!r} is not NxCxHxW with positive integers, e.g. 16x64x56x56")
    return shape


def saved_bytes(fn: Callable[[], Tensor]) -> int:
    """Bytes of the distinct tensors autograd stores while ``fn()`` builds its graph."""
    seen: dict[tuple[int, int], int] = {}

    def pack(t: Tensor) -> Tensor:
        key = (t.untyped_storage().data_ptr(), t.storage_offset()) if t.device.type != "meta" else (id(t), 0)
        seen[key] = max(seen.get(key, 0), t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_times(steps: dict[str, Callable[[], None]], reps: int, warmup: int, device: torch.device) -> dict[str, list[float]]:
    """Seconds of each timed repetition of each step, running the steps round-robin ``warmup + reps`` times."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    for rep in range(warmup + reps):
        for name, step in steps.items():
            synchronize(device)
            start = time.perf_counter()
            step()
            synchronize(device)
            if rep >= warmup:
                times[name].append(time.perf_counter() - start)
    return times


@dataclass
class LayerResult:
    layer: str
    shape: tuple[int, int, int, int]
    baseline: str
    ms: float  # median
    min_ms: float
    saved_bytes: int
    input_bytes: int
    ratio: float = float("nan")
    min_ratio: float = float("nan")

    @property
    def saved_ratio(self) -> float:
        return self.saved_bytes / self.input_bytes


def layer_step(layer: nn.Module, x: Tensor, grad: Tensor) -> Callable[[], None]:
    def step() -> None:
        inp = x.detach().requires_grad_()
        layer(inp).backward(grad)

    return step


def bench_shape(shape, layers, args, device, dtype) -> list[LayerResult]:
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    x = torch.randn(shape, device=device, dtype=dtype).contiguous(memory_format=layout)
    grad = torch.randn_like(x)
    modules = {name: make(shape[1]).to(device).train(not args.eval) for name, (make, _) in layers.items()}
    steps = {name: layer_step(m, x, grad) for name, m in modules.items()}
    times = interleaved_times(steps, args.reps, args.warmup, device)
    results = []
    for name, module in modules.items():
        kept = saved_bytes(lambda: module(x.detach().requires_grad_()))
        ms = statistics.median(times[name]) * 1e3, min(times[name]) * 1e3
        results.append(LayerResult(name, shape, layers[name][1], *ms, kept, x.numel() * x.element_size()))
    by_name = {r.layer: r for r in results}
    for r in results:
        r.ratio = r.ms / by_name[r.baseline].ms
        r.min_ratio = r.min_ms / by_name[r.baseline].min_ms
    return results


@dataclass
class ModelResult:
    pair: str
    batch: int
    size: int
    ms: dict[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        evonorm, baseline = self.ms.values()
        return evonorm / baseline


def resnet50_models(device: torch.device, layout) -> dict[str, nn.Module]:
    """ResNet-50 (random init) with native BN-ReLU, native GN-ReLU and converted EvoNorm-S0/B0."""
    from torchvision.models import resnet50

    models = {
        "evonorm_s0": convert_norm_act(resnet50(), "evonorm_s0"),
        "gn_relu (native)": resnet50(norm_layer=lambda c: nn.GroupNorm(32, c)),
        "evonorm_b0": convert_norm_act(resnet50(), "evonorm_b0"),
        "bn_relu (native)": resnet50(),
    }
    return {name: m.to(device, memory_format=layout).train() for name, m in models.items()}


def bench_model(args, device: torch.device) -> list[ModelResult]:
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    models = resnet50_models(device, layout)
    images = torch.randn(args.model_batch, 3, args.model_size, args.model_size, device=device).contiguous(memory_format=layout)
    labels = torch.randint(0, 1000, (args.model_batch,), device=device)

    def train_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> Callable[[], None]:
        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=DTYPES[args.dtype], enabled=args.dtype in ("bfloat16", "float16")):
                loss = F.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()

        return step

    steps = {n: train_step(m, torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)) for n, m in models.items()}
    medians = {n: statistics.median(t) for n, t in interleaved_times(steps, args.model_reps, 1, device).items()}
    names = list(models)
    return [
        ModelResult(f"{names[i]} vs {names[i + 1]}", args.model_batch, args.model_size, {n: medians[n] * 1e3 for n in names[i:i + 2]})
        for i in (0, 2)
    ]


def format_layer_table(results: list[LayerResult]) -> str:
    lines = [
        f"{'shape':<14} {'layer':<24} {'median ms':>9} {'ratio':>6} {'min ms':>8} {'ratio':>6} "
        f"{'saved MB':>9} {'x input':>8}  ratios vs"
    ]
    for r in results:
        shape = "x".join(map(str, r.shape))
        lines.append(
            f"{shape:<14} {r.layer:<24} {r.ms:>9.2f} {r.ratio:>6.2f} {r.min_ms:>8.2f} {r.min_ratio:>6.2f} "
            f"{r.saved_bytes / 2**20:>9.2f} {r.saved_ratio:>8.2f}  {r.baseline}"
        )
    return "\n".join(lines)


def format_model_lines(results: list[ModelResult]) -> str:
    lines = []
    for r in results:
        times = ", ".join(f"{n} {ms:.0f} ms" for n, ms in r.ms.items())
        lines.append(f"ResNet-50 train step (batch {r.batch}, {r.size}x{r.size}): {r.pair}: {r.ratio:.2f}x  ({times})")
    return "\n".join(lines)


def plot(results: list[LayerResult], path: str) -> None:
    """Two bar panels per layer (one bar per shape): time ratio vs its baseline, saved bytes / input bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = list(dict.fromkeys(r.layer for r in results))
    shapes = list(dict.fromkeys(r.shape for r in results))
    width = 0.8 / len(shapes)
    fig, axes = plt.subplots(2, 1, figsize=(max(8, len(layers) * 0.7), 8), sharex=True)
    for i, shape in enumerate(shapes):
        rows = {r.layer: r for r in results if r.shape == shape}
        xs = [j + i * width for j in range(len(layers))]
        label = "x".join(map(str, shape))
        axes[0].bar(xs, [rows[n].ratio for n in layers], width, label=label)
        axes[1].bar(xs, [rows[n].saved_ratio for n in layers], width, label=label)
    axes[0].set_ylabel("fwd+bwd time / baseline")
    axes[0].axhline(1.0, color="k", lw=0.8)
    axes[1].set_ylabel("bytes kept for backward / input bytes")
    axes[1].axhline(1.0, color="k", lw=0.8)
    axes[1].set_xticks([j + 0.4 - width / 2 for j in range(len(layers))], layers, rotation=60, ha="right")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="+", type=parse_shape, default=[parse_shape(s) for s in DEFAULT_SHAPES],
                   metavar="NxCxHxW", help=f"input shapes (default: ResNet-50 stage shapes {' '.join(DEFAULT_SHAPES)})")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32",
                   help="input dtype of the layer benchmark; for the model step, bfloat16/float16 mean autocast (default float32)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default cpu)")
    p.add_argument("--channels-last", action="store_true", help="use the channels_last memory layout (default NCHW)")
    p.add_argument("--eval", action="store_true", help="benchmark layers in eval mode (default train mode)")
    p.add_argument("--reps", type=int, default=15, help="timed repetitions per layer and shape (default 15)")
    p.add_argument("--warmup", type=int, default=3, help="untimed repetitions before timing (default 3)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2, this machine's cores)")
    p.add_argument("--layers", nargs="+", metavar="SUBSTRING",
                   help="only layers whose name contains one of these (baselines are always kept)")
    p.add_argument("--no-timm", action="store_true", help="leave out timm's EvoNorm2dS0/B0 even if timm is importable")
    p.add_argument("--no-model", action="store_true", help="skip the whole-model ResNet-50 training step")
    p.add_argument("--model-batch", type=int, default=None,
                   help="ResNet-50 step batch size (default 8 on CUDA, 4 on CPU, where 8 at 224 takes minutes)")
    p.add_argument("--model-size", type=int, default=None, help="ResNet-50 step image size (default 224 on CUDA, 128 on CPU)")
    p.add_argument("--model-reps", type=int, default=5, help="timed repetitions of the model step (default 5)")
    p.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    p.add_argument("--plot", metavar="PATH", help="also draw the time and saved-bytes ratios into this PNG file")
    args = p.parse_args(argv)
    for name in ("reps", "warmup", "threads", "model_reps"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            p.error(f"--{name.replace('_', '-')} must be at least {0 if name == 'warmup' else 1}, got {getattr(args, name)}")
    try:
        args.device = torch.device(args.device)
    except RuntimeError as err:
        p.error(f"--device {args.device!r} is not a torch device: {err}")
    if args.device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda was given but no CUDA GPU is available")
    on_gpu = args.device.type == "cuda"
    args.model_batch = args.model_batch or (8 if on_gpu else 4)
    args.model_size = args.model_size or (224 if on_gpu else 128)
    return args


def select_layers(args) -> dict[str, tuple[Callable[[int], nn.Module], str]]:
    layers = layer_factories(include_timm=not args.no_timm)
    if args.layers:
        layers = {n: v for n, v in layers.items() if "(native)" in n or any(s in n for s in args.layers)}
    return layers


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dtype, layers = DTYPES[args.dtype], select_layers(args)
    print(f"# torch {torch.__version__}, device {args.device}, {args.threads} threads, {args.dtype}, "
          f"{'channels_last' if args.channels_last else 'NCHW'}, {'eval' if args.eval else 'train'} mode, "
          f"median and min of {args.reps} interleaved reps after {args.warmup} warm-up; CPU kernels: "
          f"{evonorm_core.ops.status()}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    results = []
    for shape in args.shapes:
        results += bench_shape(shape, layers, args, args.device, dtype)
        print(format_layer_table([r for r in results if r.shape == shape]), flush=True)
    model_results = [] if args.no_model else bench_model(args, args.device)
    if model_results:
        print(format_model_lines(model_results))
    if args.plot:
        plot(results, args.plot)
        print(f"wrote {args.plot}")
    if args.json:
        payload = {
            "config": {k: str(v) if isinstance(v, torch.device) else v for k, v in vars(args).items()},
            "torch": torch.__version__,
            "load_average": os.getloadavg(),
            "layers": [asdict(r) | {"saved_ratio": r.saved_ratio} for r in results],
            "models": [asdict(r) | {"ratio": r.ratio} for r in model_results],
        }
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
