"""evonorm_core.experiment.convergence: the flatness of a curve's last fifth, by hand."""
import math

import pytest

from evonorm_core.experiment.convergence import last_fifth_flatness


def test_the_last_fifth_of_fifteen_epochs_is_three_epochs():
    curve = [10.0] * 12 + [97.0, 98.5, 98.0]  # the last 3: range 1.5; slope: x = -1, 0, 1 -> (-97 + 98) / 2 = 0.5
    assert last_fifth_flatness(curve) == {"points": 3, "range": 1.5, "slope": 0.5}


def test_a_fifth_is_rounded_up_and_at_least_two_points():
    assert last_fifth_flatness([0.0, 1.0, 3.0, 6.0, 10.0, 15.0, 21.0])["points"] == 2  # 7 / 5 = 1.4 -> 2
    result = last_fifth_flatness([5.0, 1.0, 4.0])  # 3 / 5 -> 1, at least 2: the last two
    assert result == {"points": 2, "range": 3.0, "slope": 3.0}
    assert last_fifth_flatness(list(range(11)))["points"] == 3  # 11 / 5 = 2.2 -> 3


def test_a_straight_line_has_its_slope_and_a_flat_curve_none():
    line = [2.0 * epoch + 1 for epoch in range(10)]  # last fifth: 2 points, 17 and 19
    assert last_fifth_flatness(line) == {"points": 2, "range": 2.0, "slope": pytest.approx(2.0)}
    assert last_fifth_flatness([50.0] * 10) == {"points": 2, "range": 0.0, "slope": 0.0}


def test_short_or_diverged_curves_have_no_flatness():
    assert last_fifth_flatness([]) is None and last_fifth_flatness([99.0]) is None
    assert last_fifth_flatness([10.0] * 8 + [math.nan, 10.0]) is None
