#!/usr/bin/env python3
"""Program capture of models with EvoNorm layers, checked against eager execution.

Each check captures a model with one of PyTorch's program-capture tools, runs the
captured program and eager PyTorch from the same state on the same input, and compares
the outputs, the parameter gradients of a fixed scalar loss (where the captured program is
differentiable) and the buffers afterwards (moving averages in train mode). Every run
starts from the same random seed, and compiled code draws random numbers as eager does
(Inductor's ``fallback_random``), so dropout and stochastic depth agree too:

* ``compile``: ``torch.compile(model, fullgraph=True)`` (a graph break is an error);
* ``export``: ``torch.export.export`` and the exported program's module;
* ``onnx``: ``torch.onnx.export`` (eval models) run by ``onnxruntime``;
* ``jit_trace``: ``torch.jit.trace``;
* ``fx``: ``torch.fx.symbolic_trace``;
* ``feature_extractor``: ``torchvision.models.feature_extraction.create_feature_extractor``
  returning the model's output node.

A graph break under ``fullgraph=True`` fails the compile check;
:func:`graph_breaks` counts them (``torch._dynamo.explain``).

``python tools/check_capture.py`` converts torchvision's ResNet-50 to each EvoNorm and
prints and saves the report::

    python tools/check_capture.py                                  # every EvoNorm, train and eval
    python tools/check_capture.py --layers evonorm_s0 --checks compile export --modes train
    python tools/check_capture.py --models resnet50 mobilenet_v2 efficientnet_b0 --json capture.json

A tool, not part of the library: ``evonorm_core`` does not import it (``tests/test_capture.py``
uses its checks on every layer).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from evonorm_core import ops, running_stats
from evonorm_core.convert import convert_norm_act
from evonorm_core.experiment.arguments import check_output_paths
from evonorm_core.experiment.files import atomic_write_json
from evonorm_core.registry import list_norm_acts, resolve_name

CHECKS = ("compile", "export", "onnx", "jit_trace", "fx", "feature_extractor")
# Largest accepted error, relative to the largest magnitude of the compared tensor, per
# dtype. The compiled program fuses and reorders arithmetic; the others run eager's
# kernels. In float32, reordering noise can cross the kinks of max() (EvoNorm-B) and ReLU
# in a deep random-init network and move single gradients by percents, so the checks run
# in float64 by default (ONNX, whose runtime lacks float64 convolutions, in float32).
TOLERANCES = {
    torch.float64: {"compile": 1e-8, "export": 1e-9, "onnx": 1e-8, "jit_trace": 1e-9, "fx": 1e-9,
                    "feature_extractor": 1e-9},
    torch.float32: {"compile": 1e-3, "export": 1e-5, "onnx": 1e-4, "jit_trace": 1e-5, "fx": 1e-5,
                    "feature_extractor": 1e-5},
}
DTYPES = {"float64": torch.float64, "float32": torch.float32}
EVONORMS = ("evonorm_b0", "evonorm_b1", "evonorm_b2", "evonorm_s0", "evonorm_s1", "evonorm_s2")
TORCHVISION_MODELS = ("resnet50", "mobilenet_v2", "efficientnet_b0")


@dataclass
class CaptureResult:
    """One check of one model: ``ok`` (captured and matching), the largest relative error
    over outputs, gradients and buffers, and what went wrong otherwise."""

    model: str
    layer: str
    impl: str
    mode: str
    check: str
    ok: bool
    max_error: float | None
    seconds: float
    detail: str = ""


RUN_SEED = 20201130


@dataclass
class Outcome:
    output: Tensor
    grads: dict[str, Tensor]
    buffers: dict[str, Tensor]


def _probe(out: Tensor) -> Tensor:
    """A fixed weighting of the output: the loss ``(out * probe).sum()`` gives every output a gradient."""
    gen = torch.Generator().manual_seed(1234)
    return torch.randn(out.shape, generator=gen).to(out.device, torch.float32)


def run(model: nn.Module, program: Callable[[Tensor], Tensor], x: Tensor, grads: bool) -> Outcome:
    """Run ``program(x)`` (built from ``model``) and, with ``grads``, backpropagate the probe loss."""
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(RUN_SEED)  # dropout and stochastic depth draw the same numbers in every run
    with torch._inductor.config.patch(fallback_random=True):  # compiled code draws them as eager does
        out = program(x)
    if isinstance(out, dict):
        (out,) = out.values()
    gradients = {}
    if grads:
        (out.float() * _probe(out)).sum().backward()
        gradients = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    buffers = {n: b.detach().clone() for n, b in model.named_buffers() if b.is_floating_point()}
    return Outcome(out.detach(), gradients, buffers)


def relative_error(got: Outcome, want: Outcome, grads: bool) -> float:
    """Largest ``max|got - want| / max|want|`` over the output, gradients and buffers."""
    pairs = [(got.output, want.output)]
    if grads:
        missing = set(want.grads) ^ set(got.grads)
        if missing:
            raise AssertionError(f"gradients missing for {sorted(missing)[:3]}")
        pairs += [(got.grads[n], want.grads[n]) for n in want.grads]
    pairs += [(got.buffers[n], want.buffers[n]) for n in want.buffers if n in got.buffers]
    worst = 0.0
    for a, b in pairs:
        if a.shape != b.shape:
            raise AssertionError(f"shape {tuple(a.shape)} != {tuple(b.shape)}")
        scale = b.double().abs().max().item() if b.numel() else 0.0
        err = (a.double() - b.double()).abs().max().item() if b.numel() else 0.0
        worst = max(worst, err / max(scale, 1e-12))
    return worst


def _onnx_program(model: nn.Module, x: Tensor) -> Callable[[Tensor], Tensor]:
    import onnxruntime  # an optional dependency (the "export" extra), needed only for the onnx check

    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exported = torch.onnx.export(model, (x,), dynamo=True, verbose=False)
    session = onnxruntime.InferenceSession(exported.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name

    def program(inp: Tensor) -> Tensor:
        return torch.from_numpy(session.run(None, {name: inp.detach().cpu().numpy()})[0])

    return program


def _feature_extractor(model: nn.Module) -> nn.Module:
    # torchvision is an optional dependency here, needed only for this check and torchvision_model
    from torchvision.models.feature_extraction import (
        create_feature_extractor,
        get_graph_node_names,
    )

    train_nodes, eval_nodes = get_graph_node_names(model)
    return create_feature_extractor(model, train_return_nodes={train_nodes[-1]: "out"},
                                    eval_return_nodes={eval_nodes[-1]: "out"})


def capture(check: str, model: nn.Module, x: Tensor, backend: str = "inductor") -> tuple[nn.Module, Callable]:
    """The captured program of ``model`` for ``check``, and the module whose parameters it uses."""
    if check == "compile":
        torch._dynamo.reset()  # a fresh cache per model: no recompilation limits, no stale guards
        return model, torch.compile(model, fullgraph=True, backend=backend)
    if check == "export":
        module = torch.export.export(model, (x,)).module()
        return module, module
    if check == "onnx":
        return model, _onnx_program(model, x)
    if check == "jit_trace":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecation and per-shape TracerWarnings
            traced = torch.jit.trace(model, (x,), check_trace=False)
        return traced, traced
    if check == "fx":
        traced = torch.fx.symbolic_trace(model)
        return traced, traced
    if check == "feature_extractor":
        extractor = _feature_extractor(model)
        return extractor, extractor
    raise ValueError(f"unknown check {check!r}; accepted: {list(CHECKS)}")


def check_capture(model: nn.Module, x: Tensor, check: str, *, backend: str = "inductor",
                  labels: dict[str, str] | None = None) -> CaptureResult:
    """Capture ``model`` (in its current train/eval mode) with ``check`` and compare with eager."""
    labels = {"model": "", "layer": "", "impl": "", **(labels or {})}
    mode = "train" if model.training else "eval"
    if check == "onnx" and x.dtype == torch.float64:  # onnxruntime has no float64 convolution
        model, x = copy.deepcopy(model).float(), x.float()
    tolerance = TOLERANCES[x.dtype][check]
    grads = check != "onnx"
    start = time.perf_counter()
    if check == "onnx" and model.training:
        return CaptureResult(**labels, mode=mode, check=check, ok=False, max_error=None, seconds=0.0,
                             detail="ONNX export is for eval models")
    try:
        eager_model = copy.deepcopy(model)
        want = run(eager_model, eager_model, x, grads)
        captured_model = copy.deepcopy(model)
        owner, program = capture(check, captured_model, x, backend)
        # captures that run the model while capturing (jit.trace, export) may move its
        # moving averages: start the comparison from the original state
        owner.load_state_dict(model.state_dict(), strict=False)
        got = run(owner, program, x, grads)
        error = relative_error(got, want, grads)
    except Exception as err:  # noqa: BLE001 (a failed capture is a result, reported with its reason)
        message = f"{type(err).__name__}: {err}".strip().replace("\n", " ")
        return CaptureResult(**labels, mode=mode, check=check, ok=False, max_error=None,
                             seconds=time.perf_counter() - start, detail=message[:500])
    ok = error <= tolerance
    detail = "" if ok else f"error {error:.2e} above tolerance {tolerance:.0e} ({str(x.dtype)[6:]})"
    return CaptureResult(**labels, mode=mode, check=check, ok=ok, max_error=error,
                         seconds=time.perf_counter() - start, detail=detail)


def graph_breaks(model: nn.Module, x: Tensor) -> int:
    """Number of graph breaks ``torch._dynamo`` finds in ``model(x)``."""
    torch._dynamo.reset()
    return torch._dynamo.explain(model)(x).graph_break_count


# ---- the report: converted torchvision models ---------------------------------------------

def torchvision_model(name: str, layer: str, impl: str) -> nn.Module:
    """torchvision's ``name`` (random init, 10 classes) with every BatchNorm(+activation) converted to ``layer``."""
    import torchvision  # an optional dependency, needed only for the report's models

    model = getattr(torchvision.models, name)(num_classes=10)
    options = {"impl": impl} if layer.startswith("evonorm") else {}
    return convert_norm_act(model, layer, **options)


def report(models, layers, impls, modes, checks, *, batch: int, size: int, backend: str,
           dtype: torch.dtype = torch.float64, on_result: Callable[[CaptureResult], None] | None = None) -> list[CaptureResult]:
    """Every check of every converted model. Eval models first get moving averages of random
    batches (:func:`running_stats.recalibrate`), as a trained model has them: with the initial
    ones (variance 1) a random-init ResNet-50 amplifies float32 rounding differences across
    the kinks of max() and ReLU, and ONNX Runtime (float32 only) differs from eager by 1e-3."""
    results = []
    for model_name in models:
        for layer in layers:
            for impl in impls:
                for mode in modes:
                    torch.manual_seed(0)
                    model = torchvision_model(model_name, layer, impl).to(dtype)
                    x = torch.randn(batch, 3, size, size, dtype=dtype)
                    if mode == "eval":  # moving averages of this data, as a trained model has them
                        running_stats.recalibrate(model, [torch.randn_like(x) for _ in range(2)])
                    model.train(mode == "train")
                    for check in checks:
                        if check == "onnx" and mode == "train":
                            continue
                        labels = {"model": model_name, "layer": layer, "impl": impl}
                        result = check_capture(model, x, check, backend=backend, labels=labels)
                        results.append(result)
                        if on_result:
                            on_result(result)
    return results


def format_result(r: CaptureResult) -> str:
    error = "-" if r.max_error is None else f"{r.max_error:.1e}"
    status = "ok" if r.ok else "FAIL"
    return (f"{r.model:<16} {r.layer:<12} {r.impl:<9} {r.mode:<5} {r.check:<17} {status:<4} {error:>8} "
            f"{r.seconds:>7.1f}s  {r.detail}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python tools/check_capture.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["resnet50"], choices=TORCHVISION_MODELS,
                   help="torchvision models to convert (default resnet50)")
    p.add_argument("--layers", nargs="+", default=list(EVONORMS), metavar="NAME",
                   help="registered layer names to convert to (default: the six EvoNorms)")
    p.add_argument("--impls", nargs="+", default=["fused"], choices=["fused", "reference"],
                   help="EvoNorm implementations (default fused)")
    p.add_argument("--modes", nargs="+", default=["train", "eval"], choices=["train", "eval"],
                   help="model modes (default both; ONNX runs in eval only)")
    p.add_argument("--checks", nargs="+", default=list(CHECKS), choices=CHECKS, help="captures to check (default all)")
    p.add_argument("--batch", type=int, default=2, help="input batch size (default %(default)s)")
    p.add_argument("--size", type=int, default=64, help="input image size (default %(default)s)")
    p.add_argument("--backend", default="inductor", choices=torch._dynamo.list_backends(exclude_tags=()),
                   metavar="BACKEND", help="torch.compile backend, one of torch._dynamo.list_backends() (default "
                   "%(default)s)")
    p.add_argument("--dtype", choices=list(DTYPES), default="float64",
                   help="model and input dtype (default %(default)s, see TOLERANCES; ONNX always runs float32)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default %(default)s)")
    p.add_argument("--json", metavar="PATH", help="also write every result to this JSON file")
    args = p.parse_args(argv)
    check_output_paths(p, args, "--json")
    for name in ("batch", "size", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    known = set(list_norm_acts())
    for layer in args.layers:
        try:
            resolve_name(layer)
        except (KeyError, ValueError):
            p.error(f"--layers: {layer!r} is not a registered layer; accepted: {', '.join(sorted(known))}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the report; exit status 1 if any check failed."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    ops.bypass_autograd_cache()  # check this tree's operators' autograd, not a cached graph of earlier ones
    print(f"# torch {torch.__version__}, {args.threads} threads, {args.dtype} input {args.batch}x3x{args.size}x{args.size}, "
          f"compile backend {args.backend}, EvoNorm CPU kernels: {ops.status()}, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    print(f"{'model':<16} {'layer':<12} {'impl':<9} {'mode':<5} {'check':<17} {'':<4} {'rel err':>8} {'time':>8}")
    results = report(args.models, args.layers, args.impls, args.modes, args.checks, batch=args.batch, size=args.size,
                     backend=args.backend, dtype=DTYPES[args.dtype], on_result=lambda r: print(format_result(r), flush=True))
    failed = [r for r in results if not r.ok]
    print(f"{len(results) - len(failed)} of {len(results)} checks passed")
    if args.json:
        payload = {"config": vars(args), "torch": torch.__version__, "kernels": str(ops.status()),
                   "load_average": os.getloadavg(), "results": [asdict(r) for r in results]}
        atomic_write_json(args.json, payload)
        print(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
