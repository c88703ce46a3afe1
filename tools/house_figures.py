"""Print the house figures of a bindscope tree: lines, long functions, typed arguments.

Usage: ``python tools/house_figures.py [PACKAGE_DIR]`` (default: ``bindscope`` beside this
folder). Run it on two checkouts to report a change before and after. Lines are physical
lines of ``*.py`` files. A function's length is from its ``def`` to its last line. The typed
share counts the parameters of every function (``self`` and ``cls`` excluded) that carry an
annotation, outside the modules shipped to NDIF (``interventions/ops.py``), whose trace
bodies are kept free of typing on purpose. "Minus the features added since 7741e15" leaves out
the files listed in ``ADDED_FEATURES``, to compare the same features with the issue's 18.2k;
that undercounts them, since features also grew files that existed. "Minus every feature commit"
subtracts the net lines of each commit listed in ``feature_commits.tsv`` (read with git, so only
for this checkout): what is left is 18,198 plus the house's own change since 7741e15.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

LONG = 60
SHIPPED = {"interventions/ops.py"}
BASE, BASE_LINES = "7741e15", 18_198  # the issue's 18.2k
# Whole files that came with a feature added after BASE (git diff --diff-filter=A BASE HEAD);
# a file that existed at BASE and grew, or was split from one that did (embedded_models from
# loading.py, pairs from experiments/patching.py, ablation_sets renamed from head_sets), is old.
ADDED_FEATURES = {
    "circuits": (
        "experiments/circuit.py",
        "figures/circuit.py",
        "interventions/graph.py",
        "prompts/tasks.py",
        "runners/circuit.py",
        "runners/edges.py",
    ),
    "local NDIF server": ("cli/ndif.py", "remote/server/"),
    "model cache": ("loading/cache.py",),
    "sequential statistics": ("metrics/stats/power.py", "metrics/stats/sequential.py"),
    "patching sweep": ("runners/patching_sweep.py",),
}


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _arguments(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    found = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    found += [x for x in (a.vararg, a.kwarg) if x is not None]
    return [x for x in found if x.arg not in ("self", "cls")]


def figures(package: Path) -> dict:
    """Lines (total, per sub-package, per added feature), long functions, the typed share."""
    lines: Counter[str] = Counter()
    added: Counter[str] = Counter()
    long: list[tuple[int, str]] = []
    typed = total = 0
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package).as_posix()
        text = path.read_text("utf-8")
        part = where.split("/")[0] if "/" in where else "(top level)"
        lines[part] += len(text.splitlines())
        for feature, paths in ADDED_FEATURES.items():
            if where.startswith(paths):
                added[feature] += len(text.splitlines())
        for fn in _functions(ast.parse(text)):
            length = (fn.end_lineno or fn.lineno) - fn.lineno + 1
            if length > LONG:
                long.append((length, f"{where}:{fn.lineno} {fn.name}"))
            if where not in SHIPPED:
                args = _arguments(fn)
                total += len(args)
                typed += sum(a.annotation is not None for a in args)
    return {
        "lines": sum(lines.values()),
        "per_package": dict(sorted(lines.items())),
        "added": dict(added),
        "long": sorted(long, reverse=True),
        "typed": typed,
        "arguments": total,
    }


FEATURE_COMMITS = Path(__file__).with_name("feature_commits.tsv")


def feature_lines(repo: Path) -> dict[str, int]:
    """Net ``bindscope/*.py`` lines that the commits of ``feature_commits.tsv`` added, per issue."""
    per_issue: Counter[str] = Counter()
    for line in FEATURE_COMMITS.read_text("utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        commit, issue, _ = line.split("\t", 2)
        stat = subprocess.run(
            [
                "git",
                "-C",
                str(repo),
                "show",
                "--numstat",
                "--format=",
                commit,
                "--",
                "bindscope/*.py",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        per_issue[issue] += sum(
            int(a) - int(d) for a, d, _ in (r.split("\t") for r in stat.splitlines())
        )
    return dict(per_issue)


def main(argv: list[str]) -> int:
    """Print the figures of ``argv[0]`` (default: this checkout's ``bindscope``)."""
    package = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "bindscope"
    found = figures(package)
    print(f"package lines: {found['lines']}")
    for part, n in found["per_package"].items():
        print(f"  {part:<16}{n:>7}")
    added = sum(found["added"].values())
    print(
        f"minus the features added since {BASE}: {found['lines'] - added} "
        f"(vs {BASE_LINES:,} at {BASE}; those features: {added})"
    )
    for feature, n in found["added"].items():
        print(f"  {feature:<24}{n:>7}")
    if not argv:
        by_issue = feature_lines(package.parent)
        same = found["lines"] - sum(by_issue.values())
        print(
            f"minus every feature commit since {BASE} ({FEATURE_COMMITS.name}): {same} "
            f"(the house's own change since {BASE}: {same - BASE_LINES:+})"
        )
        for issue, n in sorted(by_issue.items()):
            print(f"  issue {issue:<18}{n:>7}")
    outside = [f for f in found["long"] if not f[1].startswith(tuple(SHIPPED))]
    print(f"functions over {LONG} lines: {len(found['long'])} ({len(outside)} outside ops.py)")
    for length, where in found["long"]:
        print(f"  {length:>4}  {where}")
    share = found["typed"] / max(found["arguments"], 1)
    print(
        f"typed arguments outside {', '.join(sorted(SHIPPED))}: {found['typed']} of "
        f"{found['arguments']} ({share:.1%})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
