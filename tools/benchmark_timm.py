#!/usr/bin/env python3
"""Benchmark a timm EvoNorm model's training step: timm's own EvoNorm layers against the suite's fused ones.

Builds the timm model (default ``resnetv2_50d_evos``, whose 51 ``EvoNorm2dS0`` layers are the
composed formula) and a copy with every timm EvoNorm swapped for the suite's fused layer computing
the same function, carrying its parameters (``evonorm_core.swap_timm_evonorms``; same class, same
convolutions). Before timing, both are checked to give the same logits (eval, and train-mode
losses). Then, in one process, eager and under ``torch.compile``, it times one SGD training step
(forward, cross-entropy, backward, optimizer step) of each model, the two interleaved
round-robin (every other round reversed, as ``tools/benchmark_layers.py`` does), and measures
the step's peak memory (tensor memory allocated during the step above what it started with;
CUDA: the allocator's peak, CPU: PyTorch's allocations and frees recorded by the profiler).
Ratios are the swapped model's over timm's, measured in the same run.

    python tools/benchmark_timm.py                                   # CPU: batch 4, 128x128, 2 threads
    python tools/benchmark_timm.py --device cuda --batch 32 --size 224 --reps 20
    python tools/benchmark_timm.py --batch 2 --size 64 --reps 2 --json ''   # a smoke run

A tool, not part of the library: ``evonorm_core`` does not import it. Needs timm.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import evonorm_core
from evonorm_core import ops
from evonorm_core.experiment import cpu_load
from evonorm_core.experiment.arguments import check_output_paths
from evonorm_core.experiment.config import command_line
from evonorm_core.experiment.files import atomic_write_json

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TIMM, SWAPPED = "timm EvoNorm", "swapped (evonorm_core)"


def benchmark_layers():
    """``tools/benchmark_layers.py``, whose interleaved timing and peak-memory measurement this benchmark
    shares (``tools/`` is a folder of scripts, not a package; loaded under the name the tests use)."""
    name = "tools_benchmark_layers"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("benchmark_layers.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@dataclass
class StepResult:
    model: str
    compiled: bool
    batch: int
    size: int
    ms: dict[str, float]  # median of the timed steps
    min_ms: dict[str, float]
    peak_mb: dict[str, float]
    compile_s: dict[str, float]

    @property
    def ratio(self) -> float:
        return self.ms[SWAPPED] / self.ms[TIMM]

    @property
    def min_ratio(self) -> float:
        return self.min_ms[SWAPPED] / self.min_ms[TIMM]

    @property
    def memory_ratio(self) -> float:
        return self.peak_mb[SWAPPED] / self.peak_mb[TIMM]


def timm_evonorm_models() -> list[str]:
    """The names of timm's models built with its EvoNorm layers (an error naming the extra if timm is missing)."""
    try:
        import timm  # an optional dependency (the "bench" extra), needed only by this tool
    except ImportError:
        raise SystemExit("tools/benchmark_timm.py needs timm: pip install -e .[bench]") from None
    return timm.list_models("*_evo*")


def build_models(args) -> dict[str, nn.Module]:
    """timm's model and its copy with the suite's layers, on the device, in train mode."""
    import timm  # an optional dependency (the "bench" extra), needed only by this tool

    torch.manual_seed(0)
    model = timm.create_model(args.model, num_classes=args.classes)
    swapped = evonorm_core.swap_timm_evonorms(model, impl=args.impl)
    report = swapped.norm_act_report
    if not report.carried:
        raise SystemExit(f"{args.model}: no timm EvoNorm could be swapped ({report}); nothing to compare")
    print(f"# {args.model}: {report}", flush=True)
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    return {name: m.to(args.device, memory_format=layout).train() for name, m in ((TIMM, model), (SWAPPED, swapped))}


def check_same_function(models: dict[str, nn.Module], images: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Largest logit difference in eval and loss difference in training between the two models (float32)."""
    timm_model, swapped = models[TIMM], models[SWAPPED]
    with torch.no_grad():
        for m in models.values():
            m.eval()
        logits = (timm_model(images) - swapped(images)).abs().max().item()
        for m in models.values():
            m.train()
        losses = [F.cross_entropy(m(images), labels).item() for m in (timm_model, swapped)]
    return {"max_logit_diff_eval": logits, "loss_diff_train": abs(losses[0] - losses[1]), "loss_train": losses[0]}


def bench(args, models: dict[str, nn.Module], compiled: bool) -> StepResult:
    tools = benchmark_layers()
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    images = torch.randn(args.batch, 3, args.size, args.size, device=args.device).contiguous(memory_format=layout)
    labels = torch.randint(0, args.classes, (args.batch,), device=args.device)
    steps, compile_s = tools.training_steps(models, images, labels, args.dtype, compiled, lr=1e-4)
    times = tools.interleaved_times(steps, args.reps, args.warmup, args.device)
    return StepResult(
        args.model, compiled, args.batch, args.size,
        {n: statistics.median(t) * 1e3 for n, t in times.items()}, {n: min(t) * 1e3 for n, t in times.items()},
        {n: tools.peak_step_bytes(step, args.device) / 2**20 for n, step in steps.items()}, compile_s,
    )


def format_result(r: StepResult) -> str:
    each = "; ".join(f"{n} {r.ms[n]:.1f} ms (min {r.min_ms[n]:.1f}) / {r.peak_mb[n]:.0f} MB"
                     + (f", compiled in {r.compile_s[n]:.0f} s" if n in r.compile_s else "") for n in r.ms)
    return (f"{r.model} train step (batch {r.batch}, {r.size}x{r.size}, {'compiled' if r.compiled else 'eager'}): "
            f"swapped / timm time {r.ratio:.2f}x (min {r.min_ratio:.2f}x), peak memory {r.memory_ratio:.2f}x  ({each})")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python tools/benchmark_timm.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnetv2_50d_evos",
                   help="a timm model built with timm's EvoNorms (default %(default)s; also regnetz_b16_evos, "
                        "ese_vovnet39b_evos)")
    p.add_argument("--batch", type=int, default=None, help="images per step (default 32 on CUDA, 4 on CPU)")
    p.add_argument("--size", type=int, default=None, help="image size in pixels (default 224 on CUDA, 128 on CPU)")
    p.add_argument("--classes", type=int, default=1000, help="classifier outputs (default %(default)s)")
    p.add_argument("--reps", type=int, default=5, help="timed steps per model and mode (default %(default)s)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps per model before timing (default %(default)s)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default %(default)s, this machine's cores)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default %(default)s)")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32",
                   help="float32 (default), or bfloat16/float16 under autocast")
    p.add_argument("--channels-last", action="store_true", help="use the channels_last memory layout (default NCHW)")
    p.add_argument("--impl", choices=["fused", "reference"], default="fused",
                   help="the swapped layers' implementation (default %(default)s; reference: the suite's composed formula)")
    p.add_argument("--no-eager", action="store_true", help="skip the eager steps")
    p.add_argument("--no-compiled", action="store_true", help="skip the torch.compile steps")
    p.add_argument("--json", metavar="PATH", default="docs/results/benchmark_timm.json",
                   help="write every number to this JSON file (default %(default)s; '' for none)")
    args = p.parse_args(argv)
    check_output_paths(p, args, "--json")
    evonorm_models = timm_evonorm_models()
    if args.model.split(".")[0] not in evonorm_models:  # a pretrained tag (name.tag) names the same model
        p.error(f"--model {args.model!r} is not a timm model built with EvoNorms; accepted: "
                f"{', '.join(evonorm_models)}")
    for name in ("reps", "warmup", "threads", "classes", "batch", "size"):
        value, least = getattr(args, name), 0 if name == "warmup" else 1
        if value is not None and value < least:
            p.error(f"--{name} must be at least {least}, got {value}")
    if args.no_eager and args.no_compiled:
        p.error("--no-eager and --no-compiled leave nothing to measure")
    try:
        args.device = torch.device(args.device)
    except RuntimeError as err:
        p.error(f"--device {args.device!r} is not a torch device: {err}")
    if args.device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda was given but no CUDA GPU is available")
    on_gpu = args.device.type == "cuda"
    args.batch = args.batch or (32 if on_gpu else 4)
    args.size = args.size or (224 if on_gpu else 128)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    busy = cpu_load.busy_elsewhere()
    print(f"# torch {torch.__version__}, device {args.device}, {args.threads} threads, {args.dtype}, "
          f"{'channels_last' if args.channels_last else 'NCHW'}, median and min of {args.reps} interleaved steps "
          f"after {args.warmup} warm-up; EvoNorm CPU kernels: {ops.status()}; {cpu_load.describe(busy)}", flush=True)
    models = build_models(args)
    gen = torch.Generator().manual_seed(1)
    images = torch.randn(args.batch, 3, args.size, args.size, generator=gen).to(args.device)
    labels = torch.randint(0, args.classes, (args.batch,), generator=gen).to(args.device)
    same = check_same_function(models, images, labels)
    print(f"# same function: largest logit difference {same['max_logit_diff_eval']:.2e} (eval), loss difference "
          f"{same['loss_diff_train']:.2e} (train, loss {same['loss_train']:.3f})", flush=True)
    results = []
    for compiled in (False, True):
        if (args.no_compiled if compiled else args.no_eager):
            continue
        results.append(bench(args, models, compiled))
        print(format_result(results[-1]), flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "command": command_line("python tools/benchmark_timm.py", argv),
            "config": {k: str(v) if isinstance(v, torch.device) else v for k, v in vars(args).items()},
            "torch": torch.__version__,
            "kernels": str(ops.status()),
            "busy_elsewhere": busy,
            "load_average": os.getloadavg(),
            "same_function": same,
            "steps": [asdict(r) | {"ratio": r.ratio, "min_ratio": r.min_ratio, "memory_ratio": r.memory_ratio}
                      for r in results],
        }
        atomic_write_json(args.json, payload)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
