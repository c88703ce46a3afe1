"""Check that two checkouts give bit-identical numbers on the default model.

Usage::

    PYTHONPATH=OLD_CHECKOUT OMP_NUM_THREADS=1 .venv/bin/python tools/same_numbers.py old.npz
    OMP_NUM_THREADS=1 .venv/bin/python tools/same_numbers.py new.npz
    .venv/bin/python tools/same_numbers.py old.npz new.npz     # compare

With one argument it writes the BSI of every head on every canonical prompt, EB* and the
scores of every recognition choice, computed by whichever ``bindscope`` the path imports
(run it from outside both checkouts so that PYTHONPATH decides). With two it compares the
files and exits 1 when anything differs (NaN, a skipped prompt, equals NaN). Give both runs
the same ``OMP_NUM_THREADS``: torch's CPU sums depend on the thread count (1 against 2
threads moved 12 of the 738 scores by up to 4.8e-6 on one commit).
"""

from __future__ import annotations

import sys

import numpy as np


def write(out: str) -> None:
    """Compute the numbers with the imported bindscope and save them to ``out``."""
    from bindscope import load_model, prompts
    from bindscope.runners.behaviour import recognition
    from bindscope.runners.binding import binding

    model = load_model(None)
    records = list(prompts.load("canonical").records)
    bound = binding(model, records)
    recognised = recognition(model, [r for r in records if r.task == "recognition"])
    np.savez(
        out,
        bsi=np.stack([np.asarray(r.bsi, dtype=np.float64) for r in bound]),
        eb_star=np.array([r.eb_star for r in bound]),
        scores=np.array([s for r in recognised for s in r.scores]),
    )
    print(f"{out}: {len(bound)} prompts, {len(recognised)} recognition items")


def compare(old: str, new: str) -> int:
    """Print, per array, whether the two files hold the same numbers; 1 when any differs."""
    a, b = np.load(old), np.load(new)
    same = True
    for key in a.files:
        equal = a[key].shape == b[key].shape and np.array_equal(a[key], b[key], equal_nan=True)
        same &= equal
        print(f"{key} {a[key].shape}: {'identical' if equal else 'DIFFERENT'}")
    return 0 if same else 1


if __name__ == "__main__":
    if len(sys.argv) == 2:
        write(sys.argv[1])
    elif len(sys.argv) == 3:
        sys.exit(compare(sys.argv[1], sys.argv[2]))
    else:
        sys.exit(__doc__)
