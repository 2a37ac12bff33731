"""Table 1's primitives, checked against float64 references written from the paper's formulas."""
import pytest
import torch

from evonorm_core.search import PRIMITIVES, GraphLayer, ops_for_mode, parse

EPS = 1e-5
N, C, H, W, GROUPS = 3, 8, 4, 5, 4


def ref_mean(x, dims):
    return x.mean(dim=dims, keepdim=True)


def ref_var(x, dims):
    return ((x - ref_mean(x, dims)) ** 2).mean(dim=dims, keepdim=True)


def grouped(fn, x):
    """Apply ``fn(x, dims)`` over (c/g, h, w) by viewing channels as (groups, C/groups)."""
    xg = x.reshape(N, GROUPS, C // GROUPS, H, W)
    return fn(xg, (2, 3, 4)).expand_as(xg).reshape(N, C, H, W)


AXES = {"batch": (0, 2, 3), "channel": (1, 2, 3), "instance": (2, 3)}
REFERENCES = {
    "neg": lambda a: -a,
    "sigmoid": lambda a: 1 / (1 + torch.exp(-a)),
    "tanh": lambda a: (torch.exp(a) - torch.exp(-a)) / (torch.exp(a) + torch.exp(-a)),
    "exp": lambda a: torch.exp(a),
    "log": lambda a: torch.sign(a) * torch.log(a.abs() + EPS),
    "abs": lambda a: a.abs(),
    "square": lambda a: a * a,
    "sqrt": lambda a: torch.sign(a) * a.abs() ** 0.5,
}
for axis, dims in AXES.items():
    REFERENCES[f"{axis}_mean"] = lambda a, d=dims: ref_mean(a, d).expand_as(a)
    REFERENCES[f"{axis}_std"] = lambda a, d=dims: torch.sqrt(ref_var(a, d) + EPS).expand_as(a)
    REFERENCES[f"{axis}_rms"] = lambda a, d=dims: torch.sqrt(ref_mean(a * a, d) + EPS).expand_as(a)
REFERENCES["group_mean"] = lambda a: grouped(ref_mean, a)
REFERENCES["group_std"] = lambda a: torch.sqrt(grouped(ref_var, a) + EPS)
REFERENCES["group_rms"] = lambda a: torch.sqrt(grouped(lambda t, d: ref_mean(t * t, d), a) + EPS)


def layer_output(expression, x, train=True):
    layer = GraphLayer(parse(expression), C, eps=EPS, groups=GROUPS).double().train(train)
    return layer(x)


@pytest.fixture
def x():
    return torch.randn(N, C, H, W, dtype=torch.float64) * 2 + 0.3


def test_table1_has_12_elementwise_and_12_aggregation_ops():
    assert len(PRIMITIVES) == 24
    assert sum(op.aggregation for op in PRIMITIVES.values()) == 12
    assert {op.name for op in PRIMITIVES.values() if op.uses_batch_statistics} == {"batch_mean", "batch_std", "batch_rms"}
    assert set(ops_for_mode("S")) == set(PRIMITIVES) - {"batch_mean", "batch_std", "batch_rms"}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_unary_op_matches_formula(name, x):
    torch.testing.assert_close(layer_output(f"{name}(x)", x), REFERENCES[name](x), rtol=1e-10, atol=1e-10)


def test_binary_ops_match_formulas(x):
    ty = torch.tanh(x)
    cases = {"x + tanh(x)": x + ty, "x * tanh(x)": x * ty, "max(x, tanh(x))": torch.maximum(x, ty),
             "x / tanh(x)": x / (ty + EPS * torch.sign(ty))}
    for expression, expected in cases.items():
        torch.testing.assert_close(layer_output(expression, x), expected, rtol=1e-10, atol=1e-10)


def test_div_by_zero_is_not_finite_and_sqrt_is_signed(x):
    assert not torch.isfinite(layer_output("x / 0", x)).any()  # sign(0) = 0: no eps to save it
    torch.testing.assert_close(layer_output("sqrt(-x)", x), -torch.sign(x) * x.abs().sqrt())


def test_aggregations_of_broadcast_nodes_equal_those_of_the_expanded_tensor(x):
    layer = GraphLayer(parse("x * 0 + group_std(v1 * sigmoid(v0 + x * 0))"), C, groups=GROUPS).double()
    with torch.no_grad():
        layer.v1.copy_(torch.arange(C, dtype=torch.float64))
        layer.v0.copy_(torch.linspace(-1, 1, C, dtype=torch.float64))
    values = (torch.arange(C, dtype=torch.float64) * torch.sigmoid(torch.linspace(-1, 1, C, dtype=torch.float64)))
    expected = REFERENCES["group_std"](values.view(1, C, 1, 1).expand(N, C, H, W).clone())
    torch.testing.assert_close(layer(x), expected)


def test_batch_ops_use_moving_averages_in_eval(x):
    momentum = 0.1
    layer = GraphLayer(parse("batch_mean(x) + batch_std(x) * batch_rms(x)"), C, momentum=momentum).double()
    batches = [x, torch.randn_like(x) * 3 - 1]
    running = {"mean": torch.zeros(C, dtype=torch.float64), "var": torch.ones(C, dtype=torch.float64),
               "ms": torch.ones(C, dtype=torch.float64)}
    count = N * H * W
    for batch in batches:
        out = layer(batch)
        mean, var = ref_mean(batch, AXES["batch"]), ref_var(batch, AXES["batch"])
        ms = ref_mean(batch * batch, AXES["batch"])
        expected = mean + torch.sqrt(var + EPS) * torch.sqrt(ms + EPS)
        torch.testing.assert_close(out, expected.expand_as(batch))
        running["mean"] += momentum * (mean.flatten() - running["mean"])
        running["var"] += momentum * (var.flatten() * count / (count - 1) - running["var"])
        running["ms"] += momentum * (ms.flatten() - running["ms"])
    layer.eval()
    r = {k: v.view(1, C, 1, 1) for k, v in running.items()}
    expected = r["mean"] + torch.sqrt(r["var"] + EPS) * torch.sqrt(r["ms"] + EPS)
    torch.testing.assert_close(layer(x), expected.expand_as(x))
    before = layer(x).clone()
    layer(x)
    torch.testing.assert_close(layer(x), before)  # eval never updates the averages


def test_gamma_beta_follow_the_graph(x):
    layer = GraphLayer(parse("tanh(x)"), C).double()
    with torch.no_grad():
        layer.weight.fill_(2.0)
        layer.bias.fill_(-0.5)
    torch.testing.assert_close(layer(x), torch.tanh(x) * 2 - 0.5)
