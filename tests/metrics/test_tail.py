"""The GPD tail p: calibrated under the null, and never used where the exact p suffices."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from bindscope.metrics.stats import tail
from bindscope.metrics.stats.frontier import TAIL_CALIBRATED_SETS

#: Null sets per simulated run: C5's default maximum, where the exact p stops at 1/200.
N_NULL = 199
#: Simulated runs per distribution.
N_SIMS = 2000
#: Heavy-tailed nulls: Student t (3 df, xi = 1/3), lognormal (xi -> 0, slowly), Pareto
#: (alpha 2.5, xi = 0.4); and the normal, the shape a mean drop over many items takes.
DRAWS = {
    "normal": lambda rng, size: rng.standard_normal(size=size),
    "t3": lambda rng, size: rng.standard_t(3, size=size),
    "lognormal": lambda rng, size: rng.lognormal(0.0, 1.0, size=size),
    "pareto": lambda rng, size: rng.pareto(2.5, size=size),
}
ALPHAS = (0.01, 0.001)


def combined_p(observed: float, null: np.ndarray) -> float:
    """The p a reader gets: the tail p where it was fitted, else the exact rank p."""
    found = tail.tail_p_value(observed, null)
    exact = (found.exceedances + 1) / (null.size + 1)
    return found.p if found.method == tail.GPD else exact


def simulated_ps(name: str, seed: int, *, n_sims: int = N_SIMS, n_null: int = N_NULL) -> np.ndarray:
    """Under the null: the "top" value is one more draw from the null's distribution.

    Vectorised: the exact p where 10 or more null values reach the top one (no fit), a fit
    only for the rest (about 10 / 200 of the runs). ``tools/calibrate_tail_p.py`` runs it
    larger.
    """
    rng = np.random.default_rng(seed)
    draws = DRAWS[name](rng, (n_sims, n_null + 1))
    top, null = draws[:, 0], draws[:, 1:]
    hits = (null >= top[:, None]).sum(axis=1)
    ps = (hits + 1) / (n_null + 1)
    for i in np.flatnonzero(hits < tail.MIN_EXCEEDANCES):
        ps[i] = combined_p(top[i], null[i])
    return ps


#: Null sets per run checked: C5's default and the fewest the powered preset relies on.
CALIBRATED_AT = (TAIL_CALIBRATED_SETS, N_NULL)


@pytest.mark.parametrize("n_null", CALIBRATED_AT)
@pytest.mark.parametrize("name", sorted(DRAWS))
def test_tail_p_rejects_at_the_nominal_rate_under_the_null(name, n_null):
    ps = simulated_ps(name, seed=sorted(DRAWS).index(name), n_null=n_null)
    # 16 checks (4 nulls x 2 levels x 2 sizes) at a family-wise 99%: each at 1 - 0.01 / 16;
    # a rejection count of a calibrated p is Binomial(N_SIMS, alpha)
    confidence = 1 - 0.01 / (len(DRAWS) * len(ALPHAS) * len(CALIBRATED_AT))
    for alpha in ALPHAS:
        low, high = sps.binom.interval(confidence, N_SIMS, alpha)
        rejected = int((ps <= alpha).sum())
        assert low <= rejected <= high, (name, n_null, alpha, rejected, (low, high))


def test_the_tail_reaches_below_the_exact_floor():
    # a far-out top value on a t3 null: the exact p stops at 1/200, the tail goes below it
    rng = np.random.default_rng(0)
    null = rng.standard_t(3, size=N_NULL)
    found = tail.tail_p_value(float(np.max(null)) * 3, null, n_boot=50, seed=1)
    assert found.method == tail.GPD and found.p < 1 / (N_NULL + 1)
    assert found.low <= found.p <= found.high
    assert found.n_tail in tail.tail_sizes(N_NULL + 1) and found.ad_statistic <= found.ad_critical


def test_no_approximation_where_exceedances_are_enough():
    rng = np.random.default_rng(1)
    null = rng.standard_t(3, size=N_NULL)
    ordered = np.sort(null)[::-1]
    at_ten = tail.tail_p_value(ordered[tail.MIN_EXCEEDANCES - 1], null)
    assert (at_ten.method, at_ten.p, at_ten.exceedances) == (tail.EXACT, None, 10)
    at_nine = tail.tail_p_value(ordered[tail.MIN_EXCEEDANCES - 2], null)
    assert at_nine.exceedances == 9 and at_nine.method in (tail.GPD, tail.NO_FIT)


def test_too_few_sets_or_no_fit_leave_the_exact_p():
    # under 40 values with the observed one, no tail of 10 is a quarter of them
    assert tail.tail_p_value(100.0, np.arange(38.0)).method == tail.TOO_FEW
    assert tail.tail_p_value(100.0, np.arange(39.0)).method != tail.TOO_FEW
    # a null of few distinct values (0/1 accuracy drops over few items): no fit passes
    found = tail.tail_p_value(5.0, np.repeat([0.0, 0.1, 0.2], 40))
    assert (found.method, found.p) == (tail.NO_FIT, None)


@pytest.mark.parametrize("shape", [0.5, -0.3])
def test_the_fit_check_rejects_five_percent_of_true_gpd_samples(shape):
    """Choulakian and Stephens tabulate by k = -xi: at the right shape the 5% critical value
    rejects 5% of GPD samples fitted by maximum likelihood (a heavy tail, xi 0.5, and a bounded
    one, xi -0.3). Their k read as xi gives 1.32 at xi 0.5 and 0.88 at xi -0.3: 2 and 64 of
    the 600 rejected, both outside the interval."""
    rng = np.random.default_rng(7)
    n_sims, n = 600, 100
    rejected = 0
    for _ in range(n_sims):
        excess = np.sort(sps.genpareto.rvs(shape, size=n, random_state=rng))
        fit_shape, fit_scale = tail._gpd(excess)
        rejected += tail.ad_statistic(excess, fit_shape, fit_scale) > tail.ad_critical(fit_shape)
    # two checks at a family-wise 99.9%: a calibrated count is Binomial(n_sims, 0.05)
    low, high = sps.binom.interval(1 - 0.001 / 2, n_sims, 0.05)
    assert low <= rejected <= high, (shape, rejected, (low, high))
