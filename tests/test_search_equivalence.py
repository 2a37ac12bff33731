"""The functional-equivalence fingerprint: equal for equal functions, different when only eval mode differs."""
import torch

from evonorm_core.search import EquivalenceCache, fingerprint, parse
from evonorm_core.search.equivalence import FINGERPRINT_SHAPE, initial_response, probe_outputs


def test_equal_functions_share_a_fingerprint():
    assert fingerprint(parse("x * v1 + v0")) == fingerprint(parse("v0 + v1 * x"))
    assert fingerprint(parse("max(x, x) / instance_std(x)")) == fingerprint(parse("x / instance_std(x)"))
    assert fingerprint(parse("x * v1")) != fingerprint(parse("x * v0"))  # v0, v1 are probed with random values


def test_float_noise_does_not_split_equal_functions():
    """Reassociated arithmetic is the same function a few ulps apart: it must share a fingerprint, or
    the cache trains it again and the window admits it twice."""
    for a, b in [("x * v1 * v0", "x * (v0 * v1)"), ("exp(x) * exp(v1)", "exp(x + v1)"),
                 ("x * sigmoid(x) / group_std(x)", "x / group_std(x) * sigmoid(x)")]:
        outputs = zip(probe_outputs(parse(a)), probe_outputs(parse(b)))
        assert not all(torch.equal(p, q) for p, q in outputs), (a, b)  # they do differ in the last bits
        assert fingerprint(parse(a)) == fingerprint(parse(b)), (a, b)


def test_layers_equal_in_training_but_not_in_eval_are_told_apart():
    """The batch RMS of a centred input is the batch std in training; in eval the two read moving
    averages of different statistics (biased mean square about the running mean vs unbiased variance)."""
    centred_rms = parse("x / batch_rms(x - batch_mean(x))")
    std = parse("x / batch_std(x)")
    rms_out, std_out = probe_outputs(centred_rms), probe_outputs(std)
    for train_rms, train_std in zip(rms_out[:2], std_out[:2]):
        torch.testing.assert_close(train_rms, train_std, rtol=1e-12, atol=1e-12)
    assert (rms_out[2] - std_out[2]).abs().max() > 1e-3
    assert fingerprint(centred_rms) != fingerprint(std)


def test_moving_average_state_is_part_of_the_fingerprint():
    """batch_mean(x) - batch_mean(x) is 0 in both modes, x - batch_mean(x) only in neither."""
    assert fingerprint(parse("x * v1 + (batch_mean(x) - batch_mean(x))")) == fingerprint(parse("x * v1"))
    assert fingerprint(parse("x - batch_mean(x)")) != fingerprint(parse("x - instance_mean(x)"))


def test_cache_counts_hits_and_round_trips():
    cache = EquivalenceCache()
    key = fingerprint(parse("tanh(x)"))
    assert cache.lookup(key) is None
    cache.store(key, {"accuracy": 0.5})
    cache.store(key, {"accuracy": 0.9})  # the first result stays
    assert cache.lookup(key) == {"accuracy": 0.5} and cache.hits == 1
    again = EquivalenceCache()
    again.load_state_dict(cache.state_dict())
    assert again.entries == cache.entries and again.hits == 1


def test_the_sign_of_an_overflow_is_part_of_the_fingerprint():
    """``x / 0`` is +inf or -inf with the sign of x, ``abs(x) / 0`` +inf everywhere: different functions
    (the static check rejects both, but the cache must not file one under the other's result)."""
    signed, unsigned = probe_outputs(parse("x / 0"))[0], probe_outputs(parse("abs(x) / 0"))[0]
    assert (signed == -torch.inf).any() and (unsigned == torch.inf).all()
    assert fingerprint(parse("x / 0")) != fingerprint(parse("abs(x) / 0"))


def test_nan_and_each_sign_of_infinity_are_told_apart():
    """0 / 0 is NaN everywhere, abs(x) / 0 is +inf and -abs(x) / 0 is -inf: three functions, three fingerprints
    (and each differs from a finite layer); the same non-finite function twice shares one."""
    layers = ["x * 0 / 0", "abs(x) / 0", "-abs(x) / 0", "x / 0", "tanh(x)"]
    assert len({fingerprint(parse(e)) for e in layers}) == len(layers)
    assert fingerprint(parse("-abs(x) / 0")) == fingerprint(parse("-(abs(x) / 0)"))
    assert fingerprint(parse("x * 0 / 0")) == fingerprint(parse("v1 * 0 / 0"))


def test_a_sign_flip_or_a_small_change_is_another_function():
    """Negation changes the function; so does Table 1's safe division: x * x / x is x - eps sign(x), eps = 1e-5,
    not x (a difference of 1e-5 on values of magnitude ~1, far above the rounding of float noise)."""
    assert fingerprint(parse("tanh(x)")) != fingerprint(parse("-tanh(x)"))
    assert fingerprint(parse("exp(x)")) != fingerprint(parse("-exp(x)"))
    assert fingerprint(parse("x * x / x")) != fingerprint(parse("max(x, x)"))


def test_fingerprints_agree_with_the_probe_outputs_on_random_layers():
    """Over random graphs: equal probe outputs (bit for bit) give equal fingerprints, and equal fingerprints
    come only from outputs equal to float noise (NaN = NaN, inf = inf)."""
    import random

    from evonorm_core.search import random_genome

    rng = random.Random(11)
    genomes = [random_genome(rng, mode, 3) for mode in ("B", "S") for _ in range(60)]
    outputs = [torch.cat([o.flatten() for o in probe_outputs(g)]) for g in genomes]
    prints = [fingerprint(g) for g in genomes]
    same_print = same_output = 0
    for i in range(len(genomes)):
        for j in range(i):
            close = torch.allclose(outputs[i], outputs[j], rtol=1e-7, atol=1e-10, equal_nan=True)
            if prints[i] == prints[j]:
                same_print += 1
                assert close, (genomes[i], genomes[j])
            if torch.equal(outputs[i].nan_to_num(7.0), outputs[j].nan_to_num(7.0)):
                same_output += 1
                assert prints[i] == prints[j], (genomes[i], genomes[j])
    assert same_print > 5 and len(set(prints)) > 60  # the case arose, and most layers differ


def test_float_noise_of_large_values_does_not_split_equal_functions():
    """Rounding is relative to a value's size above 1: exp(x^2) reaches ~5e20 on the probe, where reassociating
    exp(a) * exp(b) = exp(a + b) moves the result by ~1e4 in absolute terms (a few ulps)."""
    a, b = parse("exp(square(x)) * exp(v1)"), parse("exp(square(x) + v1)")
    outputs = list(zip(probe_outputs(a), probe_outputs(b)))
    assert max(p.abs().max().item() for p, _ in outputs) > 1e20
    assert max((p - q).abs().max().item() for p, q in outputs) > 1.0
    assert fingerprint(a) == fingerprint(b)


def test_same_layer_is_the_same_function_at_initialization_within_the_tolerance():
    """Constants built from nothing fold to their value (``channel_rms(group_rms(0))`` is about 0.004),
    parameter-only subgraphs start at their initial value (v0 = 0, v1 = 1); what the tolerance (1e-2)
    separates: a batch statistic, an instance statistic, a shift by 1."""
    from evonorm_core.search.equivalence import DistinctLayers, initial_response, same_layer

    tanh = initial_response(parse("tanh(x)"))
    for same in ("tanh(x + channel_rms(group_rms(0)))", "tanh(x + log(v0 + v0))", "tanh(x + log(abs(v0)))",
                 "tanh(x + tanh(v0 * max(0, v1)))", "tanh(x + log(square(v1)))", "tanh(v1 * x)"):
        assert same_layer(initial_response(parse(same)), tanh), same
    for other in ("tanh(x + batch_mean(-x))", "tanh(x / instance_std(x))", "tanh(x + v1)", "max(x, x)"):
        assert not same_layer(initial_response(parse(other)), tanh), other
    groups = DistinctLayers()
    added = [groups.add(e, initial_response(parse(e))) for e in ("tanh(x)", "tanh(x * v1)", "max(x, x)", "x + v0", "x / batch_std(x)")]
    assert added == [True, False, True, False, True] and len(groups) == 3
    assert groups.match(initial_response(parse("x * v1"))) == "max(x, x)"


# Constants built from the zero node, by hand: exp(0) = 1, sigmoid(0) = 1/2, channel_rms(0) = sqrt(eps), eps = 1e-5;
# TEN = (1 + 1)^3 + (1 + 1); K = exp(exp(e))^16 = 3.814e6^16 = 2.007e105.
ONE, EPS_ = "exp(0)", "square(channel_rms(0))"
TEN = "((exp(0) + exp(0)) * (exp(0) + exp(0)) * (exp(0) + exp(0)) + (exp(0) + exp(0)))"
HUGE = "square(square(square(square(exp(exp(exp(exp(0))))))))"


def print_of(expression):
    return fingerprint(parse(expression))


def test_a_value_and_ten_times_it_are_different_functions():
    """exp(x^2) >= 1 everywhere, so each of its values has a mantissa in [1, 10) and an exponent: 10 exp(x^2) and
    100 exp(x^2) have its mantissas with the exponent one and two higher. Rounding the mantissa must not drop the
    exponent (it did: the three shared a fingerprint, and the cache gave 10 exp(x^2) the result of exp(x^2))."""
    base = "exp(square(x))"
    assert probe_outputs(parse(base))[0].min() >= 1
    assert len({print_of(base), print_of(f"{base} * {TEN}"), print_of(f"{base} * {TEN} * {TEN}")}) == 3


def test_rounding_keeps_seven_significant_digits_at_every_magnitude():
    """The rounding is 6 decimals of a mantissa in [1, 10): a relative difference of 1e-5 (or 2.5e-6) is another
    function at any size, 1 + 2.5e-6 against 1 as much as 2.007e105 (1 + 1e-5) against 2.007e105; below 1 the
    rounding is absolute (1e-6), so 2.5e-6 against 0 too."""
    small = f"{EPS_} * sigmoid(0) * sigmoid(0)"  # 2.5e-6
    assert print_of(f"x * 0 + {ONE} + {small}") != print_of(f"x * 0 + {ONE}")
    assert print_of(f"x * 0 + {HUGE} * ({ONE} + {EPS_})") != print_of(f"x * 0 + {HUGE}")
    assert print_of(f"x * 0 + {small}") != print_of("x * 0")
    assert probe_outputs(parse(f"x * 0 + {HUGE}"))[0].min() > 1e105  # the premise: the constant is that large


def test_float_noise_around_zero_is_zero():
    """x v1 v0 - x (v0 v1) is 0 up to a few ulps of either sign (float noise just below 0 rounds to -0.0): it is
    the function 0, as x * 0 is; 0, NaN and 1 are three functions."""
    noise = probe_outputs(parse("x * v1 * v0 - x * (v0 * v1)"))[0]
    assert (noise < 0).any() and (noise > 0).any() and noise.abs().max() < 1e-12  # the premise
    assert print_of("x * v1 * v0 - x * (v0 * v1)") == print_of("x * 0")
    assert len({print_of("x * 0"), print_of("x * 0 / 0"), print_of(f"x * 0 + {ONE}")}) == 3


def test_same_layer_tolerance_is_relative_and_absolute_1e2_and_nan_equals_nan():
    """Within 1e-2 relative (of the other) plus 1e-2 absolute, computed by hand: |100.5 - 100| = 0.5 <= 0.01 + 1.0;
    |0.015 - 0| > 0.01 + 0; NaN equals NaN (and nothing else), an infinity the infinity of its sign."""
    from evonorm_core.search.equivalence import same_layer

    t = lambda *v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    assert same_layer(t(100.5, 1.0), t(100.0, 1.0)) and not same_layer(t(102.5, 1.0), t(100.0, 1.0))
    assert same_layer(t(0.009, 1.0), t(0.0, 1.0)) and not same_layer(t(0.015, 1.0), t(0.0, 1.0))
    assert same_layer(t(float("nan"), 1.0), t(float("nan"), 1.0)) and not same_layer(t(float("nan")), t(0.0))
    assert same_layer(t(float("inf")), t(float("inf"))) and not same_layer(t(float("inf")), t(-float("inf")))
    nan_layer = initial_response(parse("x * 0 / 0"))
    assert nan_layer.isnan().all() and same_layer(nan_layer, initial_response(parse("v1 * 0 / 0")))


def test_the_probe_is_its_documented_draws_and_initial_response_the_initial_parameters():
    """The probe's fixed draws, from a generator seeded 20200406: v0, then v1 (8 float64 normals each), then two
    batches of 2 randn + 0.5; outputs in training on both, then in eval on the first. With those v0 and v1,
    x * v1 + v0 is their affine map of the inputs; at the initial parameters (v0 = 0, v1 = 1) it is the inputs
    themselves (``initial_response``). The draws must not move: stored fingerprints are compared with new ones
    when a search resumes."""
    generator = torch.Generator().manual_seed(20200406)
    v0, v1 = (torch.randn(FINGERPRINT_SHAPE[1], generator=generator, dtype=torch.float64).view(1, -1, 1, 1)
              for _ in range(2))
    inputs = [torch.randn(FINGERPRINT_SHAPE, generator=generator, dtype=torch.float64) * 2 + 0.5 for _ in range(2)]
    probed = probe_outputs(parse("x * v1 + v0"))
    for got, batch in zip(probed, (inputs[0], inputs[1], inputs[0])):
        torch.testing.assert_close(got, batch * v1 + v0, rtol=0, atol=0)
    expected = torch.cat([inputs[0].flatten(), inputs[1].flatten(), inputs[0].flatten()])
    torch.testing.assert_close(initial_response(parse("x * v1 + v0")), expected, rtol=0, atol=0)


def test_cache_counts_every_hit():
    cache = EquivalenceCache()
    cache.store("a", 1)
    assert [cache.lookup("a"), cache.lookup("b"), cache.lookup("a"), cache.lookup("a")] == [1, None, 1, 1]
    assert cache.hits == 3
