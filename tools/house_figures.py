"""Print the house figures of a bindscope tree (issue 42's goals).

Usage: ``python tools/house_figures.py [PACKAGE_DIR]`` (default: ``bindscope`` beside this
folder); run it on two checkouts to report a change. Lines are physical lines of ``*.py``
files (the viewer's HTML/JS/CSS are not counted). A function's length runs from its ``def`` to
its last line. The typed share counts every parameter but ``self`` and ``cls``, in every module.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

LONG = 50
BIG = (300, 500)


def _arguments(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    found = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    found += [x for x in (a.vararg, a.kwarg) if x is not None]
    return [x for x in found if x.arg not in ("self", "cls")]


def figures(package: Path) -> dict:
    """Lines (total, per sub-package, per file), long functions, module prose, typed share."""
    per_part: Counter[str] = Counter()
    per_file: dict[str, int] = {}
    long: list[tuple[int, str]] = []
    typed = total = module_doc = 0
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package).as_posix()
        text = path.read_text("utf-8")
        n = len(text.splitlines())
        per_file[where] = n
        per_part[where.split("/")[0] if "/" in where else "(top level)"] += n
        tree = ast.parse(text)
        doc = tree.body[0] if tree.body and isinstance(tree.body[0], ast.Expr) else None
        if doc is not None and isinstance(getattr(doc, "value", None), ast.Constant):
            module_doc += (doc.end_lineno or doc.lineno) - doc.lineno + 1
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = (fn.end_lineno or fn.lineno) - fn.lineno + 1
            if length > LONG:
                long.append((length, f"{where}:{fn.lineno} {fn.name}"))
            args = _arguments(fn)
            total += len(args)
            typed += sum(a.annotation is not None for a in args)
    lines = sum(per_file.values())
    return {
        "lines": lines,
        "files": len(per_file),
        "per_part": dict(sorted(per_part.items())),
        "big": {
            b: sorted(((n, f) for f, n in per_file.items() if n > b), reverse=True) for b in BIG
        },
        "long": sorted(long, reverse=True),
        "typed": typed,
        "arguments": total,
        "module_doc_per_1000": 1000 * module_doc / max(lines, 1),
    }


def main(argv: list[str]) -> int:
    """Print the figures of ``argv[0]`` (default: this checkout's ``bindscope``)."""
    package = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "bindscope"
    found = figures(package)
    print(f"package lines: {found['lines']} in {found['files']} files")
    for part, n in found["per_part"].items():
        print(f"  {part:<16}{n:>7}")
    for bound, files in found["big"].items():
        print(f"files over {bound} lines: {len(files)}")
        for n, where in files if bound == BIG[-1] else ():
            print(f"  {n:>5}  {where}")
    print(f"functions over {LONG} lines: {len(found['long'])}")
    for length, where in found["long"]:
        print(f"  {length:>4}  {where}")
    share = found["typed"] / max(found["arguments"], 1)
    print(f"typed parameters: {found['typed']} of {found['arguments']} ({share:.1%})")
    print(f"module docstring lines per 1,000 lines: {found['module_doc_per_1000']:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
