"""Where each compiled training step's CPU time goes, per thread and library, from `perf` samples: the steps of
compiled MobileNetV2-B0 and BN-ReLU run interleaved (as tools/benchmark_layers.py times them) while ``perf record``
samples the process, and every sample is assigned to the step it fell in by its time stamp.

    python step_attribution.py run LOG.json &                  # builds, compiles, warms up, then writes READY
    perf record -k CLOCK_MONOTONIC -F 1999 -o perf.data -p $!   # attach once READY exists; ends with the process
    python step_attribution.py attribute perf.data LOG.json    # ms of samples per step: thread x library, symbols

(``run`` waits a second after writing READY for perf to attach, then times --rounds rounds with the benchmark's
``interleaved_times`` and writes each step's start and end, CLOCK_MONOTONIC, the clock ``-k CLOCK_MONOTONIC`` stamps
the samples with.) The calling thread's
milliseconds per step are about its wall time; the OpenMP worker's include its spinning while it waits for work.
Batch 4 at 128 px, 2 threads, NCHW models (Inductor lays the graph out channels_last), heap allocator setting.
"""
from __future__ import annotations

import argparse
import bisect
import json
import re
import runpy
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import torch

MODELS = ("evonorm_b0", "bn_relu")  # probe.compiled_steps' names


def run(log: Path, rounds: int, ready: Path) -> None:
    """Compile both models' steps, warm up, write ``ready``, then time ``rounds`` interleaved rounds into ``log``."""
    probe = runpy.run_path(str(Path(__file__).with_name("probe.py")), run_name="compiled_mnv2_layouts_probe")
    interleaved_times, cpu = probe["bl"].interleaved_times, torch.device("cpu")
    steps, _ = probe["compiled_steps"]("nchw")
    interleaved_times(steps, 0, 3, cpu)  # three untimed rounds
    ready.write_text("ready\n")
    time.sleep(1.0)
    spans = []

    def logged(name: str, step: Callable[[], None]) -> Callable[[], None]:
        def run_step() -> None:
            start = time.clock_gettime(time.CLOCK_MONOTONIC)
            step()
            spans.append((name, start, time.clock_gettime(time.CLOCK_MONOTONIC)))
        return run_step

    interleaved_times({name: logged(name, step) for name, step in steps.items()}, rounds, 0, cpu)
    log.write_text(json.dumps(spans) + "\n")


def library(dso: str) -> str:
    name = dso.rsplit("/", 1)[-1]
    if name.endswith(".main.so"):
        return "inductor kernels"
    if name.startswith("[JIT]") or name.startswith("perf-"):
        return "JIT (oneDNN)"
    return name


def symbol(text: str) -> str:
    """A short name: ATen's TensorIterator loops by their kernel, templates without their arguments."""
    kernel = re.findall(r"::(\w*kernel\w*)", text) if "callback_fn" in text else []
    return kernel[0] if kernel else re.sub(r"<.*", "<...>", text)[:90]


def attribute(perf_data: Path, log: Path, hz: float, top: int) -> None:
    spans = json.loads(log.read_text())
    starts = [start for _, start, _ in spans]
    count = Counter(name for name, _, _ in spans)
    script = subprocess.run(["perf", "script", "-i", str(perf_data), "-F", "pid,tid,time,ip,sym,dso"],
                            capture_output=True, text=True, check=True).stdout
    by_library, by_symbol = defaultdict(Counter), defaultdict(Counter)
    for line in script.splitlines():
        fields = line.split(None, 3)
        if len(fields) < 4 or "/" not in fields[0]:
            continue
        pid, tid = fields[0].split("/")
        at = float(fields[1].rstrip(":"))
        i = bisect.bisect_right(starts, at) - 1
        if i < 0 or at > spans[i][2]:
            continue  # between steps
        rest = fields[3]
        dso = rest[rest.rfind("(") + 1:rest.rfind(")")]
        thread = "calling thread" if pid == tid else "worker threads"
        by_library[(spans[i][0], thread)][library(dso)] += 1
        if pid == tid:
            by_symbol[spans[i][0]][(library(dso), symbol(rest[:rest.rfind("(")].strip()))] += 1

    def ms(samples: int, name: str) -> float:
        return samples / count[name] / hz * 1e3

    print(f"ms of samples per step ({hz:g} Hz), {dict(count)} steps")
    for (name, thread), libraries in sorted(by_library.items()):
        parts = ", ".join(f"{lib} {ms(n, name):.2f}" for lib, n in libraries.most_common() if ms(n, name) >= 0.05)
        print(f"{name:<11} {thread:<15} {ms(sum(libraries.values()), name):6.2f}: {parts}")
    a, b = list(MODELS)
    keys = set(by_symbol[a]) | set(by_symbol[b])
    print(f"calling thread, largest differences by symbol ({a} - {b}, ms per step):")
    for key in sorted(keys, key=lambda k: -abs(ms(by_symbol[a][k], a) - ms(by_symbol[b][k], b)))[:top]:
        print(f"  {ms(by_symbol[a][key], a) - ms(by_symbol[b][key], b):+6.2f}  ({ms(by_symbol[a][key], a):5.2f} "
              f"against {ms(by_symbol[b][key], b):5.2f})  {key[0]}: {key[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="time the interleaved compiled steps, logging their spans")
    p_run.add_argument("log", type=Path, help="JSON file for the steps' (model, start, end)")
    p_run.add_argument("--rounds", type=int, default=40, help="timed rounds (default: %(default)s)")
    p_run.add_argument("--ready", type=Path, default=Path("READY"), help="written when warm (default: %(default)s)")
    p_att = sub.add_parser("attribute", help="assign perf samples to the logged steps")
    p_att.add_argument("perf_data", type=Path, help="perf record output (-k CLOCK_MONOTONIC)")
    p_att.add_argument("log", type=Path, help="the run's JSON log")
    p_att.add_argument("--hz", type=float, default=1999, help="perf record's -F (default: %(default)s)")
    p_att.add_argument("--top", type=int, default=12, help="symbols listed (default: %(default)s)")
    args = parser.parse_args()
    if args.command == "run":
        run(args.log, args.rounds, args.ready)
    else:
        attribute(args.perf_data, args.log, args.hz, args.top)


if __name__ == "__main__":
    main()
