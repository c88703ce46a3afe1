"""The GPD tail p's calibration, larger than its test (``tests/metrics/test_tail.py``).

Usage (from the repository root)::

    OMP_NUM_THREADS=1 .venv/bin/python tools/calibrate_tail_p.py [--sims 20000] [--null 199]

Each simulated run draws a null of ``--null`` values and one more "top" value from the same
heavy-tailed distribution (Student t with 3 df, lognormal, Pareto 2.5), and takes the tail p
where fewer than 10 null values reach the top one (else the exact rank p). A calibrated p
rejects at rate alpha; the table gives each rejection count beside the 99% binomial interval
of a calibrated one. No recorded C5 set drops are stored in the repository, so only the
synthetic nulls are run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.metrics.test_tail import ALPHAS, DRAWS, simulated_ps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=20_000, help="simulated runs per null")
    parser.add_argument("--null", type=int, default=199, help="null sets per run")
    args = parser.parse_args()
    print(f"{'null':<10}{'alpha':>7}{'rejected':>10}{'expected':>10}   99% binomial interval")
    for i, name in enumerate(sorted(DRAWS)):
        ps = simulated_ps(name, seed=100 + i, n_sims=args.sims, n_null=args.null)
        for alpha in ALPHAS:
            low, high = sps.binom.interval(0.99, args.sims, alpha)
            rejected = int((ps <= alpha).sum())
            print(f"{name:<10}{alpha:>7}{rejected:>10}{alpha * args.sims:>10.0f}   "
                  f"[{low:.0f}, {high:.0f}]")  # fmt: skip


if __name__ == "__main__":
    main()
