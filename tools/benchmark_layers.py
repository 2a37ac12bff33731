#!/usr/bin/env python3
"""Benchmark normalization-activation layers: time, memory and the whole-model training step.

Per layer and input shape, in one process with interleaved repetitions (medians after
warm-up, so a noisy shared machine shifts all layers alike), it measures:

* the time of one forward + backward pass with a dense upstream gradient (train mode
  unless ``--eval``; with ``--inference`` one forward in eval mode under ``torch.inference_mode``),
  eager, and compiled with ``torch.compile`` for the layers of ``--compiled-layers`` and their baselines;
* the bytes autograd keeps for backward, counted with ``torch.autograd.graph.saved_tensors_hooks``
  (each stored tensor once), also as a multiple of the input's bytes;

for native PyTorch BN-ReLU, GN-ReLU and GN-SiLU, the composed-op reference EvoNorms
(``impl="reference"``), the fused EvoNorms and timm's ``EvoNorm2dS0``/``EvoNorm2dB0`` when
timm is importable. Ratios are against GN-SiLU for the S series and GroupNorm layers and
against BN-ReLU for the B series and BatchNorm layers, each measured in the same run
(compiled against compiled). The whole-model lines time one SGD training step of
torchvision's ResNet-50 and MobileNetV2 (``--models``) converted to EvoNorm-S0 vs native GN-ReLU
and EvoNorm-B0 vs native BN-ReLU, eager and compiled (``--model-reps`` rounds of the four models'
steps, interleaved; the time ratio is the median over rounds of each round's ratio, beside the
ratio of the fastest steps), with the step's peak memory (allocations made during the step:
activations kept for backward and temporaries; CUDA: the allocator's peak). Under load the step times
are mostly waiting for the CPUs (with 2 threads, a step whose work takes 0.5 s of CPU time
can take 3-20 s), so there the minimum's ratio is the one to read.

Every repetition calls a layer on the same input and upstream gradient, read once (untimed) just before the call,
so every layer starts from the same state whichever layer ran before it, and the composed references and timm's
layers run in rounds of their own beside their baselines (their long steps slowed the step after them): where a
call's tensors fit in the last-level cache, its passes read the cache, not memory (EvoNorms and baselines alike),
as a model's layer mostly does not (docs/benchmarks.md, "The benchmark"); the model lines are the measure of that.

    python tools/benchmark_layers.py                       # ResNet-50 stage outputs, batch 16, CPU
    python tools/benchmark_layers.py --shapes 16x64x56x56 --reps 30 --json bench.json
    python tools/benchmark_layers.py --device cuda --dtype bfloat16 --model-batch 8 --model-size 224
    python tools/benchmark_layers.py --profile-host --shapes 2x64x8x8 --layers "s0 (fused)"   # host time, by call
    python tools/benchmark_layers.py --matrix     # every layout x dtype x pass x batch combination, layers only

The speed targets (:data:`TARGETS`, docs/benchmarks.md) are checked at the end
(``--no-targets`` to skip): every fused EvoNorm's fwd+bwd no slower than its baseline (1.0x), eager and
compiled, at every shape; each whole-model step no slower and no more peak memory (1.0x); and, where
memory bounds the layer (planes of 28 x 28 and larger), fwd+bwd at >= 50 % of the copy rate.

The roofline: each shape's rounds also time ``buffer.copy_(x)`` (one read and one write of the
input, 2 passes), and each layer's ``copy %`` is the rate it would move 8 passes over the input at
(:data:`TRAFFIC_PASSES`: the forward reads x for the moments, then reads x and writes y; the backward
reads x and dy for the per-plane sums, then reads x and dy and writes dx) as a fraction of the copy's
rate, ``8 * copy_ms / (2 * ms)``. A layer whose plane groups stay in cache between its passes needs
fewer passes (5), so it can exceed 100 %. An inference forward counts 3 (:data:`INFERENCE_PASSES`).

The matrix (``--matrix``): the fused EvoNorms against their native baselines at every shape in each
combination of memory layout (NCHW, channels_last), dtype (float32, bfloat16), pass (fwd+bwd in train
mode, inference alone) and batch (``--matrix-batches``, default 16 and 2), without the compiled columns
and the model steps; one summary line per combination, every ratio held to its 1.0x target, written to
``docs/results/benchmark_matrix.json`` and ``.png``. 1-2 minutes on 2 quiet cores.

A tool, not part of the library: ``evonorm_core`` does not import it.
"""
from __future__ import annotations

import argparse
import cProfile
import ctypes
import json
import math
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.profiler import ProfilerActivity, profile

import evonorm_core
from evonorm_core import functional, ops
from evonorm_core.convert import convert_norm_act
from evonorm_core.experiment import cpu_load
from evonorm_core.experiment.arguments import check_output_paths, positive_int
from evonorm_core.experiment.config import command_line
from evonorm_core.experiment.files import atomic_write_json
from evonorm_core.experiment.tables import pyplot, save_figure
from evonorm_core.statistics import resolve_groups

# The profiler's C++ logger (Kineto) writes to the process's stderr: a start and a stop line per profiled step and,
# on a machine without a GPU, an ERROR that it found none. Quiet unless the user set a level (read at its first use).
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

# The block outputs of ResNet-50's four stages at batch 16 (224 x 224 input).
DEFAULT_SHAPES = ["16x256x56x56", "16x512x28x28", "16x1024x14x14", "16x2048x7x7"]
EVONORMS = ["evonorm_s0", "evonorm_s1", "evonorm_s2", "evonorm_b0", "evonorm_b1", "evonorm_b2"]
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
BN_RELU, GN_RELU, GN_SILU = "bn_relu (native)", "gn_relu (native)", "gn_silu (native)"
COMPILED = " compiled"
# the speed targets: the largest accepted ratio to the baseline of each kind of measurement
TARGETS = {"s_eager": 1.0, "b_eager": 1.0, "compiled": 1.0, "model_time": 1.0, "model_memory": 1.0}
# The least fraction of the copy rate a fused EvoNorm's fwd+bwd must reach where memory bounds it
# (the two largest ResNet-50 stage outputs, 56 x 56 and 28 x 28 planes).
ROOFLINE_TARGET, ROOFLINE_MIN_PLANE = 0.5, 28 * 28
COPY = "copy_ (x -> buffer)"
# Passes over the activation that a norm-act's fwd+bwd needs at least when a plane group does not stay
# in cache between passes: forward 3 (read x for the moments, read x and write y), backward 5 (read x
# and dy for the per-plane sums, read x and dy and write dx). A copy_ makes 2 (read, write).
TRAFFIC_PASSES, COPY_PASSES = 8, 2
# An inference forward: read x for the moments, then read x and write y.
INFERENCE_PASSES = 3
# --matrix: (channels_last, dtype, inference) combinations, each at every --matrix-batches batch
MATRIX = [(channels_last, dtype, inference) for channels_last in (False, True) for dtype in ("float32", "bfloat16")
          for inference in (False, True)]


class NativeNormAct(nn.Sequential):
    """A native PyTorch norm layer followed by an activation (the speed baselines)."""


def native(norm: Callable[[int], nn.Module], act: Callable[[], nn.Module]) -> Callable[[int], nn.Module]:
    return lambda c: NativeNormAct(norm(c), act())


def group_norm(num_channels: int) -> nn.GroupNorm:
    """Native GroupNorm with the S layers' groups (32, lowered until it divides the channels), so that
    any width works and the baseline normalizes over the same groups as the layer it is timed against."""
    return nn.GroupNorm(resolve_groups(num_channels, None), num_channels)


def baseline_of(name: str) -> str:
    """The layer a layer's ratio is taken against: GN-SiLU for S series / GroupNorm, else BN-ReLU."""
    return GN_SILU if ("_s" in name or "gn_" in name or "S0" in name) else BN_RELU


def layer_factories(include_timm: bool) -> dict[str, Callable[[int], nn.Module]]:
    """name -> factory of num_channels."""
    layers = {
        BN_RELU: native(nn.BatchNorm2d, nn.ReLU),
        GN_RELU: native(group_norm, nn.ReLU),
        GN_SILU: native(group_norm, nn.SiLU),
    }
    for name in EVONORMS:
        for impl in ("reference", "fused"):
            layers[f"{name} ({impl})"] = evonorm_core.norm_act_factory(name, impl=impl)
    if include_timm:
        try:  # an optional dependency (the "bench" extra), imported only when its layers are asked for
            from timm.layers import EvoNorm2dB0, EvoNorm2dS0
        except ImportError:
            print("timm is not importable: skipping its EvoNorms", file=sys.stderr)
        else:
            layers["timm EvoNorm2dS0"] = lambda c: EvoNorm2dS0(c, groups=resolve_groups(c, None))
            layers["timm EvoNorm2dB0"] = EvoNorm2dB0
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


def peak_step_bytes(step: Callable[[], None], device: torch.device) -> float:
    """Peak bytes of tensor memory ``step()`` allocates above what was allocated before it.

    CUDA: the caching allocator's peak. CPU: the allocations and frees of PyTorch's CPU
    allocator recorded by the profiler (``profile_memory``: each op's own allocations at its
    start, frees when they happen), accumulated in time order.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        return float(torch.cuda.max_memory_allocated(device) - before)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    changes = sorted((e.time_range.start, e.self_cpu_memory_usage) for e in prof.events() if e.self_cpu_memory_usage)
    current = peak = 0
    for _, delta in changes:
        current += delta
        peak = max(peak, current)
    return float(peak)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def training_steps(models: dict[str, nn.Module], images: Tensor, labels: Tensor, dtype: str, compiled: bool,
                   lr: float) -> tuple[dict[str, Callable[[], None]], dict[str, float]]:
    """One SGD training step (cross-entropy, autocast to ``dtype`` unless float32/64) per model, and, when
    ``compiled``, each model's seconds to compile under ``torch.compile`` (its first step, synchronized)."""
    autocast = dtype in ("bfloat16", "float16")

    def train_step(forward: Callable[[Tensor], Tensor], optimizer: torch.optim.Optimizer) -> Callable[[], None]:
        def step() -> None:
            with torch.autocast(images.device.type, dtype=DTYPES[dtype], enabled=autocast):
                loss = F.cross_entropy(forward(images), labels)
            loss.backward()
            optimizer.step()
            # released here, not at the next step's start: a step then frees nothing allocated before it, so
            # its peak (peak_step_bytes) is its activations, gradients and temporaries whether or not the
            # profiler records frees of earlier memory (a step's first profiled call did not: +1x the weights)
            optimizer.zero_grad(set_to_none=True)

        return step

    steps, compile_s = {}, {}
    for name, model in models.items():
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        forward = model
        if compiled:
            start = time.perf_counter()
            forward = torch.compile(model)
            train_step(forward, optimizer)()
            synchronize(images.device)
            compile_s[name] = time.perf_counter() - start
        steps[name] = train_step(forward, optimizer)
    return steps, compile_s


def interleaved_times(steps: dict[str, Callable[[], None]], reps: int, warmup: int, device: torch.device,
                      before: Callable[[], None] | None = None) -> dict[str, list[float]]:
    """Seconds of each timed repetition of each step, running the steps round-robin ``warmup + reps`` times.

    Every other round runs in reverse order (A B C, C B A, ...), so no step always runs right
    after the same neighbour, or always first or last in a round: a drift of the machine's
    speed within a round (another job's phases, the allocator's state left by the previous
    step) is shared out instead of landing on one step in every round. ``before``, if given, runs
    untimed before every step (the same starting state for each, whatever ran before it).
    """
    times: dict[str, list[float]] = {name: [] for name in steps}
    order = list(steps.items())
    for rep in range(warmup + reps):
        for name, step in order if rep % 2 == 0 else order[::-1]:
            if before is not None:
                before()
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
    compiled: bool = False
    compile_s: float = 0.0
    ratio: float = float("nan")
    min_ratio: float = float("nan")
    copy_ms: float = float("nan")  # median of copy_ of the same input, timed in the same rounds
    step: str = "fwd+bwd"  # or "inference": one forward under torch.inference_mode

    @property
    def saved_ratio(self) -> float:
        return self.saved_bytes / self.input_bytes

    @property
    def passes(self) -> int:
        return INFERENCE_PASSES if self.step == "inference" else TRAFFIC_PASSES

    @property
    def roofline(self) -> float:
        """The fraction of the copy rate the step reaches, counting :attr:`passes` over the input:
        ``(passes * bytes / ms) / (COPY_PASSES * bytes / copy_ms)``."""
        return self.passes * self.copy_ms / (COPY_PASSES * self.ms)


def layer_step(layer: Callable[[Tensor], Tensor], x: Tensor, grad: Tensor | None) -> Callable[[], None]:
    """One forward + backward with ``grad`` as the upstream gradient; with ``grad`` None one forward under
    ``torch.inference_mode`` (inference alone: no graph is built)."""
    def step() -> None:
        if grad is None:
            with torch.inference_mode():
                layer(x)
            return
        inp = x.detach().requires_grad_()
        layer(inp).backward(grad)

    return step


def read_inputs(x: Tensor, grad: Tensor | None) -> None:
    """Read ``x`` and ``grad`` once (a sum each), so that every timed step starts with them where a model's layer
    finds its input and upstream gradient, just written by its neighbours: in cache as far as they fit. Without
    it a step found them where the step before it left them, and each fused EvoNorm ran after its composed
    reference, whose temporaries had evicted them (docs/benchmarks.md, "The B series' NCHW training on lanes, the same
    start for every layer, in-place residuals")."""
    x.sum()
    if grad is not None:
        grad.sum()


def compile_layer(module: nn.Module, step_input: Tensor, grad: Tensor | None) -> tuple[Callable[[Tensor], Tensor], float]:
    """``torch.compile(module, fullgraph=True)``, compiled (forward and backward; forward alone if ``grad``
    is None) before timing."""
    start = time.perf_counter()
    compiled = torch.compile(module, fullgraph=True)
    layer_step(compiled, step_input, grad)()
    return compiled, time.perf_counter() - start


def placed(module: nn.Module, x: Tensor) -> nn.Module:
    """``module`` on ``x``'s device; native GroupNorms also in ``x``'s dtype (PyTorch's CUDA
    ``group_norm`` takes no float32 parameters with a bfloat16/float16 input; the other layers,
    like BatchNorm under mixed precision, keep float32 parameters)."""
    module.to(x.device)
    for m in module.modules():
        if isinstance(m, nn.GroupNorm):
            m.to(x.dtype)
    return module


def bench_shape(shape, layers: dict, compiled_names: list[str], args, device, dtype) -> list[LayerResult]:
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    x = torch.randn(shape, device=device, dtype=dtype).contiguous(memory_format=layout)
    grad = None if args.inference else torch.randn_like(x)
    training = not (args.eval or args.inference)
    modules = {name: placed(make(shape[1]), x).train(training) for name, make in layers.items()}
    callables: dict[str, Callable[[Tensor], Tensor]] = dict(modules)
    compile_s: dict[str, float] = {}
    for name in compiled_names:
        module = placed(layers[name](shape[1]), x).train(training)
        callables[name + COMPILED], compile_s[name + COMPILED] = compile_layer(module, x, grad)
    steps = {name: layer_step(fn, x, grad) for name, fn in callables.items()}
    buffer = torch.empty_like(x)
    steps[COPY] = lambda: buffer.copy_(x)
    times, composed_rounds = layer_times(steps, args, device, before=lambda: read_inputs(x, grad))
    copy_ms = statistics.median(times[COPY]) * 1e3
    results = []
    for name, fn in callables.items():
        kept = saved_bytes(lambda fn=fn: fn(x.detach().requires_grad_())) if name in modules and grad is not None else 0
        base = baseline_of(name) + (COMPILED if name in compile_s else "")
        ms = statistics.median(times[name]) * 1e3, min(times[name]) * 1e3
        results.append(LayerResult(name, shape, base, *ms, kept, x.numel() * x.element_size(),
                                   compiled=name in compile_s, compile_s=compile_s.get(name, 0.0), copy_ms=copy_ms,
                                   step="inference" if args.inference else "fwd+bwd"))
    for r in results:
        rounds = composed_rounds if is_composed(r.layer) else times
        if r.baseline in rounds:
            r.ratio = r.ms / (statistics.median(rounds[r.baseline]) * 1e3)
            r.min_ratio = r.min_ms / (min(rounds[r.baseline]) * 1e3)
    return results


def is_composed(name: str) -> bool:
    """A composed-op reference EvoNorm or one of timm's layers: steps of many ops, 3-13x their baselines' time."""
    return name.endswith("(reference)") or name.startswith("timm ")


def layer_times(steps: dict[str, Callable[[], None]], args, device: torch.device,
                before: Callable[[], None]) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Every step's times (:func:`interleaved_times`), and the rounds the composed layers (:func:`is_composed`) ran
    in: rounds of their own, with their baselines. In one set of rounds each fused layer ran right after its
    composed reference (in either direction of a round), whose 10-40 ms step slowed the call after it, while the
    native baselines never followed one: B0 at 16x2048x7x7 read 1.01-1.03x BN-ReLU there and 0.67-0.74x without
    them (docs/results/kernel_probes/default_run_order)."""
    times = interleaved_times({n: s for n, s in steps.items() if not is_composed(n)}, args.reps, args.warmup, device,
                              before=before)
    composed = [n for n in steps if is_composed(n)]
    if not composed:
        return times, {}
    names = [b for b in dict.fromkeys(baseline_of(n) for n in composed) if b in steps] + composed
    rounds = interleaved_times({n: steps[n] for n in names}, args.reps, args.warmup, device, before=before)
    return {**times, **{n: rounds[n] for n in composed}}, rounds


@dataclass
class ModelResult:
    pair: str
    compiled: bool
    batch: int
    size: int
    round_ratios: list[float]  # EvoNorm's step time over its baseline's, one per round, in order
    ms: dict[str, float] = field(default_factory=dict)  # median
    peak_mb: dict[str, float] = field(default_factory=dict)
    compile_s: dict[str, float] = field(default_factory=dict)
    min_ms: dict[str, float] = field(default_factory=dict)
    model: str = "resnet50"  # a key of MODELS

    @property
    def ratio(self) -> float:
        """The median over rounds of the two steps' ratio in that round: they run back to back, so a
        change of the machine's speed between rounds (another job, the memory bandwidth) cancels in
        each ratio, and one slow round moves the median by one rank instead of shifting a step's median."""
        return statistics.median(self.round_ratios)

    @property
    def min_ratio(self) -> float:
        """The ratio of the fastest repetitions: under load (other jobs taking the CPUs for
        seconds at a time) the medians of a few steps are mostly waiting, the minima much less."""
        return _evonorm_over_baseline(self.min_ms)

    @property
    def memory_ratio(self) -> float:
        return _evonorm_over_baseline(self.peak_mb)


def _evonorm_over_baseline(pair: dict[str, float]) -> float:
    """A :class:`ModelResult` field's EvoNorm value (first) over its baseline's (second)."""
    evonorm, baseline = pair.values()
    return evonorm / baseline


# The whole models timed by their training step (torchvision names and labels): ResNet-50's bottlenecks, and
# MobileNetV2's depthwise blocks (many small layers: the per-call costs).
MODELS = {"resnet50": "ResNet-50", "mobilenet_v2": "MobileNetV2"}


def whole_models(arch: str, device: torch.device, layout) -> dict[str, nn.Module]:
    """torchvision's ``arch`` (random init) converted to EvoNorm-S0 and B0, and with native GN-ReLU and BN-ReLU.

    GroupNorm takes the S layers' groups (:func:`group_norm`; MobileNetV2's 24 and 144 channels: 24 groups).
    """
    # torchvision is an optional dependency here: --no-model runs without it
    import torchvision.models

    build = getattr(torchvision.models, arch)
    models = {
        "evonorm_s0": convert_norm_act(build(), "evonorm_s0"),
        GN_RELU: build(norm_layer=group_norm),
        "evonorm_b0": convert_norm_act(build(), "evonorm_b0"),
        BN_RELU: build(),
    }
    return {name: m.to(device, memory_format=layout).train() for name, m in models.items()}


def bench_model(args, device: torch.device, compiled: bool, arch: str = "resnet50") -> list[ModelResult]:
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    models = whole_models(arch, device, layout)
    images = torch.randn(args.model_batch, 3, args.model_size, args.model_size, device=device).contiguous(memory_format=layout)
    labels = torch.randint(0, 1000, (args.model_batch,), device=device)
    steps, compile_s = training_steps(models, images, labels, args.dtype, compiled, lr=1e-3)
    times = interleaved_times(steps, args.model_reps, 1, device)
    medians = {n: statistics.median(t) * 1e3 for n, t in times.items()}
    minima = {n: min(t) * 1e3 for n, t in times.items()}
    peaks = {n: peak_step_bytes(step, device) / 2**20 for n, step in steps.items()}
    names = list(models)
    return [
        ModelResult(f"{names[i]} vs {names[i + 1]}", compiled, args.model_batch, args.model_size,
                    [e / b for e, b in zip(times[names[i]], times[names[i + 1]])],
                    {n: medians[n] for n in names[i:i + 2]}, {n: peaks[n] for n in names[i:i + 2]},
                    {n: compile_s[n] for n in names[i:i + 2] if n in compile_s}, {n: minima[n] for n in names[i:i + 2]},
                    model=arch)
        for i in (0, 2)
    ]


def format_layer_table(results: list[LayerResult]) -> str:
    """One line per layer; ``copy %``: :attr:`LayerResult.roofline`, after a line with the copy_ itself."""
    lines = [(f"{'shape':<14} {'layer':<34} {'median ms':>9} {'ratio':>6} {'min ms':>8} {'ratio':>6} "
              f"{'copy %':>6} {'saved MB':>9} {'x input':>8}  ratios vs")]
    if results:
        r = results[0]
        rate = COPY_PASSES * r.input_bytes / r.copy_ms / 1e6
        lines.append(f"{'x'.join(map(str, r.shape)):<14} {COPY:<34} {r.copy_ms:>9.2f} "
                     f"({rate:.1f} GB/s read + write; copy % counts {r.passes} passes of {r.step} at this rate)")
    for r in results:
        shape = "x".join(map(str, r.shape))
        saved = f"{r.saved_bytes / 2**20:>9.2f} {r.saved_ratio:>8.2f}" if not r.compiled else f"{'-':>9} {'-':>8}"
        lines.append(
            f"{shape:<14} {r.layer:<34} {r.ms:>9.2f} {r.ratio:>6.2f} {r.min_ms:>8.2f} {r.min_ratio:>6.2f} "
            f"{100 * r.roofline:>6.1f} {saved}  {r.baseline}"
        )
    return "\n".join(lines)


def format_model_lines(results: list[ModelResult]) -> str:
    lines = []
    for r in results:
        times = ", ".join(f"{n} {ms:.0f} ms / {r.peak_mb[n]:.0f} MB" for n, ms in r.ms.items())
        kind = "compiled" if r.compiled else "eager"
        spread = f"{min(r.round_ratios):.2f}-{max(r.round_ratios):.2f}x over {len(r.round_ratios)} rounds"
        lines.append(f"{MODELS[r.model]} train step (batch {r.batch}, {r.size}x{r.size}, {kind}): {r.pair}: time {r.ratio:.2f}x "
                     f"({spread}; min {r.min_ratio:.2f}x), peak memory {r.memory_ratio:.2f}x  ({times}; median ms)")
    return "\n".join(lines)


def target_rows(layers: list[LayerResult], models: list[ModelResult], roofline: bool = True) -> list[dict]:
    """Each speed target (:data:`TARGETS`) with the measured median ratio and whether it is met; the roofline
    targets (fwd+bwd steps at memory-bound shapes) only if ``roofline``."""
    rows = []
    for r in layers:
        base = r.layer.split(" (")[0]
        if not (base in EVONORMS and "(fused)" in r.layer):
            continue
        kind = "compiled" if r.compiled else ("s_eager" if "_s" in base else "b_eager")
        shape = "x".join(map(str, r.shape))
        rows.append({"target": f"{base}{' compiled' if r.compiled else ''} {r.step} vs {r.baseline} at {shape}",
                     "ratio": r.ratio, "limit": TARGETS[kind]})
        if roofline and r.step == "fwd+bwd" and not r.compiled and r.shape[2] * r.shape[3] >= ROOFLINE_MIN_PLANE:
            rows.append({"target": f"{base} fwd+bwd fraction of the copy rate at {shape}", "ratio": r.roofline,
                         "limit": ROOFLINE_TARGET, "at_least": True})
    for m in models:
        kind = "compiled" if m.compiled else "eager"
        rows.append({"target": f"{MODELS[m.model]} step {kind} {m.pair}", "ratio": m.ratio, "limit": TARGETS["model_time"],
                     "model": m.model})
        rows.append({"target": f"{MODELS[m.model]} step {kind} peak memory {m.pair}", "ratio": m.memory_ratio, "model": m.model,
                     "limit": TARGETS["model_memory"]})
    for row in rows:
        row["met"] = bool(row["ratio"] >= row["limit"] if row.get("at_least") else row["ratio"] <= row["limit"])
    return rows


def format_targets(rows: list[dict]) -> str:
    lines = [f"targets: {sum(r['met'] for r in rows)} of {len(rows)} met"]
    lines += [f"  {'met ' if r['met'] else 'MISS'} {r['ratio']:5.2f} {'>=' if r.get('at_least') else '<='} "
              f"{r['limit']:.2f}  {r['target']}" for r in rows]
    return "\n".join(lines)


def plot(results: list[LayerResult], models: list[ModelResult], path: str) -> None:
    """:func:`draw` into the PNG file ``path``."""
    save_figure(draw(results, models), path)


def draw(results: list[LayerResult], models: list[ModelResult]):
    """A matplotlib figure of bar panels: eager and compiled time ratios of the fused EvoNorms per shape, bytes
    kept for backward, and the whole-model steps (time and peak memory ratios), each with its target; a panel
    whose measurements were not taken (no compiled layers, no models) is left out."""
    plt = pyplot()  # matplotlib: an optional dependency, imported only for --plot
    shapes = list(dict.fromkeys(r.shape for r in results))
    step = results[0].step if results else "fwd+bwd"
    panels = [
        (f"{step} time / baseline (eager)", lambda r: not r.compiled, "ratio"),
        (f"{step} time / baseline (compiled)", lambda r: r.compiled, "ratio"),
        ("bytes kept for backward / input", lambda r: not r.compiled, "saved_ratio"),
    ]
    panels = [panel for panel in panels if any(panel[1](r) for r in results)]
    count = max(len(panels) + bool(models), 1)
    fig, axes = plt.subplots(count, 1, figsize=(12, 4 * count), squeeze=False)
    axes = axes[:, 0]
    for ax, (title, keep, attr) in zip(axes, panels):
        layers = list(dict.fromkeys(r.layer for r in results if keep(r) and "native" not in r.layer))
        width = 0.8 / max(len(shapes), 1)
        for i, shape in enumerate(shapes):
            rows = {r.layer: r for r in results if r.shape == shape and keep(r)}
            xs = [j + i * width for j in range(len(layers))]
            ax.bar(xs, [getattr(rows[n], attr) if n in rows else 0 for n in layers], width, label="x".join(map(str, shape)))
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(layers))], layers, rotation=30, ha="right", fontsize=8)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_ylabel(title)
        ax.set_yscale("log")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, not over them
    if models:
        plot_model_steps(axes[-1], models)
    fig.tight_layout()
    return fig


def plot_model_steps(ax, models: list[ModelResult]) -> None:
    """The whole-model steps' time and peak-memory ratios, with the time target."""
    labels = [f"{MODELS[m.model]} {m.pair.split(' vs ')[0]} {'compiled' if m.compiled else 'eager'}" for m in models]
    xs = range(len(models))
    ax.bar([x - 0.2 for x in xs], [m.ratio for m in models], 0.4, label="step time")
    ax.bar([x + 0.2 for x in xs], [m.memory_ratio for m in models], 0.4, label="peak memory")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(TARGETS["model_time"], color="r", lw=1.2, ls="--", label=f"{TARGETS['model_time']}x target")  # over 1.0
    ax.set_xticks(list(xs), labels, fontsize=8, rotation=20, ha="right")
    ax.set_ylabel("train step / GN-ReLU or BN-ReLU")
    ax.legend(fontsize=7)


def matrix_layers(args) -> dict[str, Callable[[int], nn.Module]]:
    """The matrix's layers: the native baselines and the fused EvoNorms (``--layers`` narrows the EvoNorms)."""
    layers, _ = select_layers(argparse.Namespace(**{**vars(args), "compiled_layers": []}))
    return {n: make for n, make in layers.items() if "(native)" in n or "(fused)" in n}


def bench_matrix(args) -> list[dict]:
    """The layer table of :func:`matrix_layers` in each combination of :data:`MATRIX` at each ``--matrix-batches``
    batch (the shapes' channels and planes), with its targets (the roofline ones for fwd+bwd at the largest batch);
    one line printed per combination."""
    layers, cells = matrix_layers(args), []
    for channels_last, dtype, inference in MATRIX:
        for batch in args.matrix_batches:
            cell_args = argparse.Namespace(**{**vars(args), "channels_last": channels_last, "inference": inference,
                                              "eval": False})
            results = [r for shape in args.shapes
                       for r in bench_shape((batch, *shape[1:]), layers, [], cell_args, args.device, DTYPES[dtype])]
            cell = {"layout": "channels_last" if channels_last else "NCHW", "dtype": dtype,
                    "step": "inference" if inference else "fwd+bwd", "batch": batch,
                    "layers": layer_rows(results),
                    "targets": target_rows(results, [], roofline=not inference and batch == max(args.matrix_batches))}
            print(format_cell(cell), flush=True)
            cells.append(cell)
    return cells


def layer_rows(results: list[LayerResult]) -> list[dict]:
    """The layer results as the JSON files keep them, with their derived ratios."""
    return [asdict(r) | {"saved_ratio": r.saved_ratio, "roofline": r.roofline} for r in results]


def cell_label(cell: dict) -> str:
    return f"{cell['layout']} {cell['dtype']} {cell['step']} batch {cell['batch']}"


def worst_ratio(cell: dict, series: str, shape: tuple[int, ...] | None = None) -> dict | None:
    """The fused EvoNorm row of ``series`` ("s" or "b") with the largest median ratio (at ``shape`` if given)."""
    rows = [r for r in cell["layers"] if r["layer"].startswith(f"evonorm_{series}") and
            (shape is None or tuple(r["shape"][1:]) == tuple(shape))]
    return max(rows, key=lambda r: r["ratio"]) if rows else None


def format_cell(cell: dict) -> str:
    """One line: the targets met, the worst S and B ratios, the misses."""
    targets = cell["targets"]
    parts = [f"{cell_label(cell)}: {sum(t['met'] for t in targets)} of {len(targets)} targets met"]
    for series in ("s", "b"):
        if (r := worst_ratio(cell, series)) is not None:
            parts.append(f"worst {series.upper()} {r['ratio']:.2f}x ({r['layer'].split(' (')[0]} at "
                         f"{'x'.join(map(str, r['shape']))})")
    missed = [f"{t['target']} {t['ratio']:.2f}" for t in targets if not t["met"]]
    return "; ".join(parts) + (f"; MISS: {', '.join(missed)}" if missed else "")


def plot_matrix(cells: list[dict], path: str) -> None:
    """A heat map: one row per combination, one column per shape and series, the worst fused ratio in each."""
    plt = pyplot()
    shapes = list(dict.fromkeys(tuple(r["shape"][1:]) for c in cells for r in c["layers"]))
    columns = [(shape, series) for shape in shapes for series in ("s", "b")]
    values = [[(r["ratio"] if (r := worst_ratio(c, series, shape)) else math.nan) for shape, series in columns]
              for c in cells]
    fig, ax = plt.subplots(figsize=(1.3 * len(columns) + 3, 0.45 * len(cells) + 1.5))
    image = ax.imshow(values, cmap="RdYlGn_r", vmin=0.0, vmax=2.0, aspect="auto")
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, fontweight="bold" if v > 1.0 else None,
                    color="white" if not 0.3 <= v <= 1.6 else "black")  # legible on the map's dark ends
    ax.set_xticks(range(len(columns)), [f"{series.upper()} {'x'.join(map(str, shape))}" for shape, series in columns],
                  rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(cells)), [cell_label(c) for c in cells], fontsize=8)
    ax.set_title("worst fused EvoNorm time / baseline (S: GN-SiLU, B: BN-ReLU); target <= 1.00", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.03)
    fig.tight_layout()
    save_figure(fig, path)


def allow_recompiles(shapes: list) -> None:
    """Let Dynamo compile each layer once per shape: layers of one class share their forward's code, whose
    compiled versions count against one limit (8 by default), and under ``fullgraph=True`` reaching it is an
    error (a run of six shapes with compiled layers failed)."""
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 4 * len(shapes))


def compiled_choice_times(shapes, mode: str, reps: int, device: torch.device) -> dict[str, dict[str, float]]:
    """Fwd+bwd milliseconds (minimum of ``reps``) of compiled EvoNorm-S0 and B0 running the
    registered operator (``mode="operator"``) or the composed formula (``"formula"``) under
    Inductor. One mode per process: the choice is read when Dynamo traces."""
    functional.COMPILED_OPERATOR_MIN_NUMEL[device.type] = 0 if mode == "operator" else None
    allow_recompiles(shapes)
    out = {}
    for shape in shapes:
        x = torch.randn(shape, device=device)
        grad = torch.randn_like(x)
        fns = {}
        for name in ("evonorm_s0", "evonorm_b0"):
            fns[name] = compile_layer(evonorm_core.build_norm_act(name, shape[1]).to(device), x, grad)[0]
        times = interleaved_times({n: layer_step(f, x, grad) for n, f in fns.items()}, reps, 2, device)
        out["x".join(map(str, shape))] = {n: min(t) * 1e3 for n, t in times.items()}
    return out


def compare_compiled(args) -> dict:
    """Run :func:`compiled_choice_times` for both modes in fresh processes; print and return them."""
    results = {}
    for mode in ("operator", "formula"):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--compiled-choice-worker", mode, "--threads",
               str(args.threads), "--reps", str(args.reps), "--device", str(args.device), "--allocator", args.allocator,
               "--shapes", *["x".join(map(str, s)) for s in args.shapes]]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{'shape':<14} {'layer':<12} {'operator ms':>11} {'formula ms':>11} {'formula/operator':>17}")
    for shape, times in results["operator"].items():
        for name, ms in times.items():
            formula = results["formula"][shape][name]
            print(f"{shape:<14} {name:<12} {ms:>11.2f} {formula:>11.2f} {formula / ms:>17.2f}")
    return results


def host_profile(step: Callable[[], None], reps: int, top: int, device: torch.device) -> list[dict]:
    """cProfile of ``reps`` calls of ``step``: the ``top`` functions by own time, in microseconds per step."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(reps):
        step()
    synchronize(device)
    profiler.disable()
    stats = pstats.Stats(profiler).sort_stats("tottime")
    rows = []
    for (path, line, func), (_, calls, own, total, _) in stats.stats.items():
        where = func if path == "~" else f"{Path(path).name}:{line}({func})"
        rows.append({"function": where, "calls_per_step": calls / reps, "own_us": own / reps * 1e6,
                     "cumulative_us": total / reps * 1e6})
    return sorted(rows, key=lambda r: -r["own_us"])[:top]


def profile_hosts(args) -> dict:
    """Per shape and selected layer: eager fwd+bwd time per step (unprofiled, ``args.reps`` steps) and its
    :func:`host_profile`. Where a layer is bound by the host (small inputs; any layer on a GPU at these
    sizes) this says which calls take the time."""
    layers, _ = select_layers(args)
    dtype, out = DTYPES[args.dtype], {}
    for shape in args.shapes:
        x = torch.randn(shape, device=args.device, dtype=dtype)
        grad = torch.randn_like(x)
        key = "x".join(map(str, shape))
        out[key] = {}
        for name, make in layers.items():
            step = layer_step(placed(make(shape[1]), x).train(not args.eval), x, grad)
            times = interleaved_times({name: step}, args.reps, args.warmup, args.device)[name]
            median_us = statistics.median(times) * 1e6
            top = host_profile(step, args.reps, args.profile_top, args.device)
            out[key][name] = {"median_us": median_us, "top": top}
            print(f"{key} {name}: {median_us:.0f} us per eager fwd+bwd (median of "
                  f"{args.reps}); by own time under cProfile, us per step:")
            for row in top:
                print(f"  {row['own_us']:8.1f} own {row['cumulative_us']:8.1f} cum {row['calls_per_step']:5.1f} calls  "
                      f"{row['function']}")
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python tools/benchmark_layers.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="+", type=parse_shape, default=[parse_shape(s) for s in DEFAULT_SHAPES],
                   metavar="NxCxHxW", help=f"input shapes (default: ResNet-50 stage outputs {' '.join(DEFAULT_SHAPES)})")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32",
                   help="input dtype of the layer benchmark; for the model step, bfloat16/float16 mean autocast (default %(default)s)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default %(default)s)")
    p.add_argument("--channels-last", action="store_true", help="use the channels_last memory layout (default NCHW)")
    p.add_argument("--eval", action="store_true", help="benchmark layers in eval mode (default train mode)")
    p.add_argument("--inference", action="store_true",
                   help="time inference alone: one forward in eval mode under torch.inference_mode, no backward "
                        "(default forward + backward)")
    p.add_argument("--matrix", action="store_true",
                   help="only the layer matrix: fused EvoNorms and native baselines (no compiled columns, no model "
                        "step) in every combination of NCHW/channels_last, float32/bfloat16, fwd+bwd/inference and "
                        "--matrix-batches; --shapes give the channels and planes (default JSON "
                        "docs/results/benchmark_matrix.json, PNG docs/results/benchmark_matrix.png)")
    p.add_argument("--matrix-batches", nargs="+", type=int, default=[16, 2], metavar="N",
                   help="with --matrix: the batch sizes each shape is timed at (default 16 2)")
    p.add_argument("--reps", type=int, default=15, help="timed repetitions per layer and shape (default %(default)s)")
    p.add_argument("--warmup", type=int, default=3, help="untimed repetitions before timing (default %(default)s)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default %(default)s, this machine's cores)")
    p.add_argument("--allocator", choices=list(ALLOCATORS), default="heap",
                   help="heap (default): glibc's malloc serves every allocation from its heap and keeps what is "
                        "freed (no mmap, no trimming), so a call's buffers are memory the process already touched; "
                        "system: malloc as the process starts with it, where buffers of 32 MiB and more are mmap'd "
                        "fresh on every call (docs/benchmarks.md, 'Fresh memory')")
    p.add_argument("--layers", nargs="+", metavar="SUBSTRING",
                   help="only layers whose name contains one of these (baselines are always kept)")
    p.add_argument("--compiled-layers", nargs="*", default=["evonorm_s0", "evonorm_b0"], metavar="NAME",
                   help="fused EvoNorms also timed under torch.compile, with the compiled baselines "
                        "(default evonorm_s0 evonorm_b0; none: no compiled columns)")
    p.add_argument("--no-timm", action="store_true", help="leave out timm's EvoNorm2dS0/B0 even if timm is importable")
    p.add_argument("--no-model", action="store_true", help="skip the whole-model training steps")
    p.add_argument("--no-compiled-model", action="store_true", help="skip the compiled whole-model training steps")
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS),
                   help="torchvision models whose training step is timed (default: all of them)")
    p.add_argument("--model-batch", type=positive_int, default=None,
                   help="whole-model step batch size (default 8 on CUDA, 4 on CPU, where 8 at 224 takes minutes)")
    p.add_argument("--model-size", type=positive_int, default=None,
                   help="whole-model step image size (default 224 on CUDA, 128 on CPU)")
    p.add_argument("--model-reps", type=int, default=11,
                   help="timed rounds of the model steps, each step once per round (default %(default)s); the time ratio "
                        "is the median over rounds of each round's EvoNorm / baseline ratio")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="write every number to this JSON file (default docs/results/benchmark_layers.json, with "
                        "--compare-compiled docs/results/compiled_choice.json, with --profile-host "
                        "docs/results/host_profile.json, with --matrix docs/results/benchmark_matrix.json; '' for none)")
    p.add_argument("--plot", metavar="PATH", default=None,
                   help="draw the ratios into this PNG file (default: beside --json with its name and .png; without "
                        "--json docs/results/benchmark_layers.png, with --matrix docs/results/benchmark_matrix.png; "
                        "'' for none)")
    p.add_argument("--no-targets", action="store_true", help="do not print the speed targets and whether each is met")
    p.add_argument("--compare-compiled", action="store_true",
                   help="only compare, under torch.compile, EvoNorm-S0/B0 running the registered operator against "
                        "the composed formula (what functional.COMPILED_OPERATOR_MIN_NUMEL chooses between)")
    p.add_argument("--profile-host", action="store_true",
                   help="only profile (cProfile) the host time of each selected layer's eager fwd+bwd per shape: "
                        "where a layer is bound by the host (small inputs, or a GPU) the calls that take the time; "
                        "--layers picks the layers (baselines kept), --reps the steps profiled")
    p.add_argument("--profile-top", type=int, default=15,
                   help="with --profile-host: how many functions to list per layer, by own time (default %(default)s)")
    p.add_argument("--compiled-choice-worker", choices=["operator", "formula"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("reps", "warmup", "threads", "model_reps", "profile_top"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            p.error(f"--{name.replace('_', '-')} must be at least {0 if name == 'warmup' else 1}, got {getattr(args, name)}")
    unknown = [n for n in args.compiled_layers if n not in EVONORMS]
    if unknown:
        p.error(f"--compiled-layers: {unknown[0]!r} is not one of {EVONORMS}")
    try:
        args.device = torch.device(args.device)
    except RuntimeError as err:
        p.error(f"--device {args.device!r} is not a torch device: {err}")
    if args.device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda was given but no CUDA GPU is available")
    if min(args.matrix_batches) < 1:
        p.error(f"--matrix-batches must be at least 1, got {min(args.matrix_batches)}")
    json_named = bool(args.json)
    if args.json is None:
        args.json = "docs/results/" + ("compiled_choice.json" if args.compare_compiled else
                                       "host_profile.json" if args.profile_host else
                                       "benchmark_matrix.json" if args.matrix else "benchmark_layers.json")
    if args.plot is None:
        args.plot = (os.path.splitext(args.json)[0] + ".png" if json_named
                     else f"docs/results/benchmark_{'matrix' if args.matrix else 'layers'}.png")
    check_output_paths(p, args, "--json", "--plot")  # before minutes of measuring, not after
    on_gpu = args.device.type == "cuda"
    args.model_batch = args.model_batch or (8 if on_gpu else 4)
    args.model_size = args.model_size or (224 if on_gpu else 128)
    return args


def select_layers(args) -> tuple[dict[str, Callable[[int], nn.Module]], list[str]]:
    """The eager layers and the names (fused EvoNorms and their baselines) also timed compiled."""
    layers = layer_factories(include_timm=not args.no_timm)
    if args.layers:
        layers = {n: v for n, v in layers.items() if "(native)" in n or any(s in n for s in args.layers)}
    fused = [f"{n} (fused)" for n in args.compiled_layers]
    for name in fused:
        layers.setdefault(name, layer_factories(False)[name])
    compiled = sorted({baseline_of(n) for n in fused}) + fused
    return layers, compiled


# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
ALLOCATORS = {"heap": "glibc malloc keeping freed memory (no mmap, no trim)", "system": "malloc as started"}


def keep_freed_memory() -> bool:
    """Make glibc's malloc serve every allocation from its heap and never give freed memory back
    (``mallopt``: no mmap, no trimming); whether it took effect (glibc only).

    By default glibc maps each buffer of 32 MiB or more fresh and unmaps it when freed, so every
    call of a layer at ResNet-50's 56 x 56 stage writes pages it has never touched. On a VM whose
    balloon reports free memory to the host (virtio-balloon free page reporting, as here) those
    pages are faulted in again through the hypervisor: measured at 16x256x56x56, every layer's
    median fwd+bwd was 1.5-9x its time with memory kept (docs/benchmarks.md, "Fresh memory"). The
    common remedy for PyTorch on CPUs is an allocator that keeps memory (jemalloc, tcmalloc); this
    is glibc's own setting for it."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def print_header(args, setting: str) -> float | None:
    """Print the run's settings and how busy other processes keep the CPUs (measured now); return the latter."""
    busy = cpu_load.busy_elsewhere()
    print(f"# torch {torch.__version__}, device {args.device}, {args.threads} threads, {setting}, "
          f"allocator: {ALLOCATORS[args.allocator]}, "
          f"median and min of {args.reps} interleaved reps after {args.warmup} warm-up; EvoNorm CPU kernels: "
          f"{ops.status()}; {cpu_load.describe(busy)}", flush=True)
    return busy


def run_matrix(args, argv: list[str] | None) -> int:
    busy = print_header(args, f"the matrix: {{NCHW, channels_last}} x {{float32, bfloat16}} x {{fwd+bwd, inference}} "
                              f"x batch {args.matrix_batches}")
    cells = bench_matrix(args)
    targets = [t for c in cells for t in c["targets"]]
    print(f"matrix: {sum(t['met'] for t in targets)} of {len(targets)} targets met in {len(cells)} combinations")
    if args.plot:
        plot_matrix(cells, args.plot)
        print(f"wrote {args.plot}")
    write_json(args.json, run_record(args, argv, busy) | {"cells": cells})
    return 0


def run_record(args, argv: list[str] | None, busy_elsewhere: float | None) -> dict:
    """What every results JSON of a layer run starts with: the settings, the command, torch, kernels, the CPUs'
    worth of other processes' work at the start (:func:`cpu_load.busy_elsewhere`) and the load average at the end."""
    return {"config": {k: str(v) if isinstance(v, torch.device) else v for k, v in vars(args).items()},
            "command": command_line("python tools/benchmark_layers.py", argv), "torch": torch.__version__,
            "kernels": str(ops.status()), "busy_elsewhere": busy_elsewhere, "load_average": os.getloadavg()}


def write_json(path: str, payload: dict) -> None:
    """``payload`` into ``path`` atomically, unless ``path`` is '' (--json '')."""
    if path:
        atomic_write_json(path, payload)
        print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.allocator == "heap" and not keep_freed_memory():
        print("note: --allocator heap needs glibc on Linux; measuring with the system allocator", file=sys.stderr)
        args.allocator = "system"
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ops.bypass_autograd_cache()  # compiled steps of this tree's operators, not a cached graph of earlier ones
    if args.compiled_choice_worker:
        print(json.dumps(compiled_choice_times(args.shapes, args.compiled_choice_worker, args.reps, args.device)))
        return 0
    if args.compare_compiled or args.profile_host:
        busy = cpu_load.busy_elsewhere()
        print(f"# torch {torch.__version__}, device {args.device}, {args.threads} threads, {args.reps} reps; "
              f"{cpu_load.describe(busy)}", flush=True)
        if args.compare_compiled:
            extra = {"min_ms": compare_compiled(args)}
        else:
            extra = {"dtype": args.dtype, "host_profile": profile_hosts(args)}
        write_json(args.json, run_record(args, argv, busy) | extra)
        return 0

    if args.matrix:
        return run_matrix(args, argv)
    dtype, (layers, compiled) = DTYPES[args.dtype], select_layers(args)
    mode = "inference" if args.inference else f"{'eval' if args.eval else 'train'} mode"
    busy = print_header(args, f"{args.dtype}, {'channels_last' if args.channels_last else 'NCHW'}, {mode}")
    allow_recompiles(args.shapes)
    results = []
    for shape in args.shapes:
        results += bench_shape(shape, layers, compiled, args, args.device, dtype)
        print(format_layer_table([r for r in results if r.shape == shape]), flush=True)
    models = []
    if not args.no_model:
        for arch in args.models:
            for is_compiled in (False, True)[: 1 if args.no_compiled_model else 2]:
                models += bench_model(args, args.device, is_compiled, arch)
                print(format_model_lines(models[-2:]), flush=True)
    rows = target_rows(results, models)
    if not args.no_targets:
        print(format_targets(rows))
    if args.plot:
        plot(results, models, args.plot)
        print(f"wrote {args.plot}")
    write_json(args.json, run_record(args, argv, busy) | {
        "layers": layer_rows(results),
        "models": [asdict(r) | {"ratio": r.ratio, "min_ratio": r.min_ratio, "memory_ratio": r.memory_ratio,
                                "label": MODELS[r.model]} for r in models],
        "targets": rows,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
