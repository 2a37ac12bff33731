"""Where ResNet-50's eager EvoNorm-S0 step and GN-ReLU's spend their time, operator by operator: the benchmark's two
models (tools/benchmark_layers.py: batch 4, 128 px, SGD, 2 threads, glibc malloc keeping freed memory), three warm-up
steps each, then ROUNDS rounds of one profiled step of each (the order reversed every other round); the PyTorch
profiler's self CPU time per operator name (the calling thread's), averaged over the rounds, the 30 largest
differences printed. One profile is not a result: the step's own spread between rounds is 10-30 %.

    python docs/results/kernel_probes/r50_s0_step_parts/profile_ops.py [ROUNDS]
"""
import collections
import runpy
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from torch.profiler import ProfilerActivity, profile

bl = SimpleNamespace(**runpy.run_path(str(Path(__file__).resolve().parents[4] / "tools" / "benchmark_layers.py"),
                                      run_name="tools_benchmark_layers"))


def main(rounds: int) -> None:
    bl.keep_freed_memory()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    built = bl.whole_models("resnet50", torch.device("cpu"), torch.contiguous_format)
    models = {"evonorm_s0": built["evonorm_s0"], "gn_relu": built["gn_relu (native)"]}
    images, labels = torch.randn(4, 3, 128, 128), torch.randint(0, 1000, (4,))
    steps, _ = bl.training_steps(models, images, labels, "float32", False, lr=1e-3)
    for _ in range(3):
        for step in steps.values():
            step()
    ms = {name: collections.Counter() for name in steps}
    calls = {name: collections.Counter() for name in steps}
    for r in range(rounds):
        for name in list(steps) if r % 2 == 0 else list(reversed(steps)):
            with profile(activities=[ProfilerActivity.CPU]) as p:
                steps[name]()
            for event in p.key_averages():
                ms[name][event.key] += event.self_cpu_time_total / 1e3 / rounds
                calls[name][event.key] += event.count / rounds
    s0, gn = ms["evonorm_s0"], ms["gn_relu"]
    print(f"per profiled step: evonorm_s0 {sum(s0.values()):.1f} ms, gn_relu {sum(gn.values()):.1f} ms ({rounds} rounds)")
    for key in sorted(set(s0) | set(gn), key=lambda k: -abs(s0[k] - gn[k]))[:30]:
        print(f"{key[:58]:58s} s0 {s0[key]:7.2f} ms ({calls['evonorm_s0'][key]:4.0f})  "
              f"gn {gn[key]:7.2f} ms ({calls['gn_relu'][key]:4.0f})  {s0[key] - gn[key]:+6.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
