"""Float64 reference formulas written straight from the paper, independent of evonorm_core.

Notation of the paper (Table 1, Sec. 3.2): ``mu_I(x)`` replaces each element by the mean
over the index set I, ``s2_I(x) = mu_I((x - mu_I(x))^2)``. Tensors are NCHW, so
(b, w, h) = dims (0, 2, 3), (w, h) = (2, 3), (w, h, c) = (1, 2, 3). Grouped aggregations
(``c/g``) split the channels into ``g`` consecutive groups. ``p`` holds the layer's
per-channel parameters (gamma, beta, v0, v1) as 1-D tensors.
"""
from __future__ import annotations

import torch

BATCH, INSTANCE, CHANNEL = (0, 2, 3), (2, 3), (1, 2, 3)


def mu(x, dims):
    return x.mean(dim=dims, keepdim=True).expand_as(x)


def s2(x, dims):
    return mu((x - mu(x, dims)) ** 2, dims)


def grouped(fn, x, groups):
    n, c, h, w = x.shape
    xg = x.reshape(n, groups, c // groups, h, w)
    return fn(xg, (2, 3, 4)).reshape(n, c, h, w)


def ch(v):
    return v.view(1, -1, 1, 1)


def sigmoid(x):
    return 1 / (1 + torch.exp(-x))


def affine(z, p):
    return z * ch(p["gamma"]) + ch(p["beta"])


def batch_var(x, p, training):
    """s2_{b,w,h}(x) in training, the moving average p['running_var'] at inference."""
    return s2(x, BATCH) if training else ch(p["running_var"]).expand_as(x)


def batch_mean(x, p, training):
    return mu(x, BATCH) if training else ch(p["running_mean"]).expand_as(x)


def evonorm_b0(x, p, eps, training, groups=None):
    den = torch.maximum(torch.sqrt(batch_var(x, p, training) + eps), ch(p["v1"]) * x + torch.sqrt(s2(x, INSTANCE) + eps))
    return x / den * ch(p["gamma"]) + ch(p["beta"])


def evonorm_b1(x, p, eps, training, groups=None):
    den = torch.maximum(torch.sqrt(batch_var(x, p, training) + eps), (x + 1) * torch.sqrt(mu(x**2, INSTANCE) + eps))
    return x / den * ch(p["gamma"]) + ch(p["beta"])


def evonorm_b2(x, p, eps, training, groups=None):
    den = torch.maximum(torch.sqrt(batch_var(x, p, training) + eps), torch.sqrt(mu(x**2, INSTANCE) + eps) - x)
    return x / den * ch(p["gamma"]) + ch(p["beta"])


def evonorm_s0(x, p, eps, training=True, groups=32):
    return x * sigmoid(ch(p["v1"]) * x) / torch.sqrt(grouped(s2, x, groups) + eps) * ch(p["gamma"]) + ch(p["beta"])


def evonorm_s1(x, p, eps, training=True, groups=32):
    return x * sigmoid(x) / torch.sqrt(grouped(s2, x, groups) + eps) * ch(p["gamma"]) + ch(p["beta"])


def evonorm_s2(x, p, eps, training=True, groups=32):
    return x * sigmoid(x) / torch.sqrt(grouped(mu, x**2, groups) + eps) * ch(p["gamma"]) + ch(p["beta"])


def _bn(x, p, eps, training):
    return affine((x - batch_mean(x, p, training)) / torch.sqrt(batch_var(x, p, training) + eps), p)


def bn_relu(x, p, eps, training, groups=None):
    return torch.clamp(_bn(x, p, eps, training), min=0)


def bn_prelu(x, p, eps, training, groups=None):
    return torch.maximum(_bn(x, p, eps, training), ch(p["v0"]))


def bn_swish1(x, p, eps, training, groups=None):
    z = _bn(x, p, eps, training)
    return z * sigmoid(z)


def bn_swish(x, p, eps, training, groups=None):
    z = _bn(x, p, eps, training)
    return z * sigmoid(ch(p["v1"]) * z)


def _gn(x, p, eps, groups):
    return affine((x - grouped(mu, x, groups)) / torch.sqrt(grouped(s2, x, groups) + eps), p)


def gn_relu(x, p, eps, training=True, groups=32):
    return torch.clamp(_gn(x, p, eps, groups), min=0)


def gn_swish(x, p, eps, training=True, groups=32):
    z = _gn(x, p, eps, groups)
    return z * sigmoid(ch(p["v1"]) * z)


def frn(x, p, eps, training=True, groups=None):
    return torch.maximum(affine(x / torch.sqrt(mu(x**2, INSTANCE) + eps), p), ch(p["v0"]))


def ln_relu(x, p, eps, training=True, groups=None):
    return torch.clamp(affine((x - mu(x, CHANNEL)) / torch.sqrt(s2(x, CHANNEL) + eps), p), min=0)


def pixelnorm_relu(x, p, eps, training=True, groups=None):
    return torch.clamp(affine(x / torch.sqrt(mu(x**2, (1,)) + eps), p), min=0)


def rs_rej(x, p, eps, training, groups=None):
    second_moment = mu(x**2, BATCH) if training else ch(p["running_var"] + p["running_mean"] ** 2).expand_as(x)
    return affine(torch.clamp(x, min=0) / torch.sqrt(second_moment + eps), p)


def no_norm_relu(x, p, eps, training=True, groups=None):
    """The no-normalization control: BN-ReLU without the normalization, max(x gamma + beta, 0)."""
    return torch.clamp(affine(x, p), min=0)


def random_rej(x, p, eps, training=True, groups=None):
    """Table 2's "Random + rej": tanh(max(x, tanh(x))) gamma + beta."""
    return affine(torch.tanh(torch.maximum(x, torch.tanh(x))), p)


def random_sample(x, p, eps, training=True, groups=None):
    """Table 2's "Random": sign(z) sqrt(|z|) gamma + beta, z = sqrt(s2_{w,h}(sigmoid(x))) (+ eps inside, as every std)."""
    z = torch.sqrt(s2(sigmoid(x), INSTANCE) + eps)
    return affine(torch.sign(z) * torch.sqrt(z.abs()), p)


# The normalization alone (nonlinearity off): EvoNorms become the affine x * gamma + beta.
def affine_only(x, p, eps, training=True, groups=None):
    return affine(x, p)


NORMALIZATION_ONLY = {
    **{f"evonorm_{s}": affine_only for s in ("b0", "b1", "b2", "s0", "s1", "s2")},
    **{f"bn_{a}": lambda x, p, eps, training, groups=None: _bn(x, p, eps, training) for a in ("relu", "prelu", "swish1", "swish")},
    "gn_relu": lambda x, p, eps, training=True, groups=32: _gn(x, p, eps, groups),
    "gn_swish": lambda x, p, eps, training=True, groups=32: _gn(x, p, eps, groups),
    "frn": lambda x, p, eps, training=True, groups=None: affine(x / torch.sqrt(mu(x**2, INSTANCE) + eps), p),
    "ln_relu": lambda x, p, eps, training=True, groups=None: affine((x - mu(x, CHANNEL)) / torch.sqrt(s2(x, CHANNEL) + eps), p),
    "pixelnorm_relu": lambda x, p, eps, training=True, groups=None: affine(x / torch.sqrt(mu(x**2, (1,)) + eps), p),
    "no_norm_relu": affine_only,
    "random_rej": affine_only,
    "random_sample": affine_only,
    "rs_rej": lambda x, p, eps, training, groups=None: affine(
        x / torch.sqrt((mu(x**2, BATCH) if training else ch(p["running_var"] + p["running_mean"] ** 2)) + eps), p
    ),
}

WITH_NONLINEARITY = {
    f.__name__: f
    for f in (
        evonorm_b0, evonorm_b1, evonorm_b2, evonorm_s0, evonorm_s1, evonorm_s2,
        bn_relu, bn_prelu, bn_swish1, bn_swish, gn_relu, gn_swish, frn, ln_relu, pixelnorm_relu, rs_rej,
        no_norm_relu, random_rej, random_sample,
    )
}

# Layers whose formula uses batch statistics (moving averages at inference).
BATCH_DEPENDENT = {"evonorm_b0", "evonorm_b1", "evonorm_b2", "bn_relu", "bn_prelu", "bn_swish1", "bn_swish", "rs_rej"}
GROUPED = {"evonorm_s0", "evonorm_s1", "evonorm_s2", "gn_relu", "gn_swish"}


def reference(name: str, nonlinearity: bool):
    """The float64 reference ``f(x, params, eps, training, groups)`` for a registered layer name."""
    return (WITH_NONLINEARITY if nonlinearity else NORMALIZATION_ONLY)[name]
