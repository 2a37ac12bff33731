"""The S forward operator in float32 against the paper's formula in float64, y = x sigmoid(v x) r (gamma 1,
beta 0), NCHW (the AVX-512 lanes' exp) and channels_last (the auto-vectorized one): the largest and the mean
relative error over outputs above 1e-3, at three shapes, x ~ N(0, 16), v ~ N(0, 4).

    PYTHONPATH=<tree> python docs/results/kernel_probes/exp_negated/accuracy.py
"""
import torch

from evonorm_core import ops


def main() -> None:
    assert ops.load("cpu"), "the C++ kernels did not load"
    torch.manual_seed(1)
    for layout in (torch.contiguous_format, torch.channels_last):
        for shape in [(8, 64, 7, 7), (4, 64, 32, 32), (8, 64, 4, 4)]:
            n, c = shape[:2]
            x = (torch.randn(shape) * 4).contiguous(memory_format=layout)
            v = torch.randn(c) * 2
            y, _, rstd = torch.ops.evonorm.s_forward(x, torch.ones(c), torch.zeros(c), v, 32, 1e-5, True)
            xd = x.double()
            r = rstd.double().repeat_interleave(c // 32, 1).view(n, c, 1, 1)
            want = xd * torch.sigmoid(v.double().view(1, -1, 1, 1) * xd) * r
            kept = want.abs() > 1e-3
            err = ((y.double() - want).abs() / want.abs())[kept]
            name = "channels_last" if layout is torch.channels_last else "nchw"
            print(f"{name} {'x'.join(map(str, shape))} max {err.max():.2e} mean {err.mean():.2e}")


if __name__ == "__main__":
    main()
