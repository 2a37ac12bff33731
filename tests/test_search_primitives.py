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


class ReferenceContext:
    """What a layer gives an op, with the batch statistics of the batch itself in float64 (training)."""

    eps, groups = EPS, GROUPS

    def batch_statistic(self, kind, value):
        dims = AXES["batch"]
        return {"mean": lambda: ref_mean(value, dims), "var": lambda: ref_var(value, dims),
                "mean_square": lambda: ref_mean(value * value, dims)}[kind]()


# Table 1 in the printers' two notations, typed from the paper (operands x and v1 / v_1).
TABLE1_NOTATION = {
    "add": ("x + v1", "x + v_1"), "mul": ("x * v1", "x v_1"), "div": ("x / v1", r"\frac{x}{v_1}"),
    "max": ("max(x, v1)", r"\max(x, v_1)"), "neg": ("-x", "-x"), "sigmoid": ("sigmoid(x)", r"\sigma(x)"),
    "tanh": ("tanh(x)", r"\tanh(x)"), "exp": ("exp(x)", "e^{x}"), "log": ("log(x)", r"\mathrm{sign}(x) \ln|x|"),
    "abs": ("abs(x)", r"\left|x\right|"), "square": ("square(x)", r"\left(x\right)^2"),
    "sqrt": ("sqrt(x)", r"\mathrm{sign}(x) \sqrt{|x|}"),
}
for _axis, _sub in {"batch": "b,w,h", "channel": "w,h,c", "instance": "w,h", "group": "w,h,c/g"}.items():
    TABLE1_NOTATION[f"{_axis}_mean"] = (f"{_axis}_mean(x)", rf"\mu_{{{_sub}}}(x)")
    TABLE1_NOTATION[f"{_axis}_std"] = (f"{_axis}_std(x)", rf"\sqrt{{s^2_{{{_sub}}}(x)}}")
    TABLE1_NOTATION[f"{_axis}_rms"] = (f"{_axis}_rms(x)", rf"\sqrt{{\mu_{{{_sub}}}((x)^2)}}")


def test_the_table_builders_make_table1(x):
    """``PRIMITIVES`` is built once, at import, by ``_elementwise`` and ``_aggregations``: build the table again
    and check every op of it as the layer tests check the imported one (a mutation tool changes what these
    functions build only when they are called, which the import did before any test ran). Each op's values
    against the float64 formula on a batch, its arity, whether it aggregates and reads batch statistics, and
    how it prints, against Table 1 as typed above."""
    from evonorm_core.search import primitives

    built = primitives._elementwise() + primitives._aggregations()
    assert [op.name for op in built] == list(PRIMITIVES)
    ctx, y = ReferenceContext(), torch.tanh(x)
    binary = {"add": x + y, "mul": x * y, "max": torch.maximum(x, y), "div": x / (y + EPS * torch.sign(y))}
    for op in built:
        expected = binary[op.name] if op.arity == 2 else REFERENCES[op.name](x)
        got = op.function(x, y, ctx) if op.arity == 2 else op.function(x, ctx)
        torch.testing.assert_close(got.expand_as(x), expected, rtol=1e-10, atol=1e-10, msg=op.name)
        assert op.arity == (2 if op.name in binary else 1), op.name
        assert op.aggregation == op.name.endswith(("_mean", "_std", "_rms")), op.name
        assert op.uses_batch_statistics == op.name.startswith("batch_"), op.name
        assert (op.infix.format("x", "v1"), op.latex.format("x", "v_1")) == TABLE1_NOTATION[op.name], op.name
        assert [(n.op, n.inputs) for n in parse(op.infix.format("x", "v1")).nodes] == [
            (op.name, (0, 3) if op.arity == 2 else (0,))]  # the infix form parses back to the op on x (and v1)


def test_search_modes_b_all_of_table1_s_no_batch_statistic_and_nothing_else():
    """Section 4 / Table 1: the B search draws from all 24 ops, the S search from the 21 that do not read the
    batch (Table 1's order kept); any other mode is refused with the accepted ones named."""
    assert ops_for_mode("B") == tuple(PRIMITIVES) and len(ops_for_mode("B")) == 24
    batch = ("batch_mean", "batch_std", "batch_rms")
    assert ops_for_mode("S") == tuple(name for name in PRIMITIVES if name not in batch)
    for mode in ("b", "s", "C", ""):
        with pytest.raises(ValueError, match=rf"^unknown search mode '{mode}'; accepted: \['B', 'S'\]$"):
            ops_for_mode(mode)
