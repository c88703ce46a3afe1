"""Summarise a BINDSCOPE_ERROR_REPORT file (see tests/conftest.py's `error_report`).

Per test and family: the largest equivalence error as a fraction of its bound, and the
smallest control miss in bounds. Usage: python tools/error_report.py FILE
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict

FAMILIES = {"gpt_neox", "gpt2", "olmo", "olmo2", "smollm3", "qwen2", "qwen3", "llama"}
FAMILIES |= {"mistral", "gemma", "gemma2", "gemma3", "phi3"}  # tests/conftest.py's 13


def family_of(nodeid: str) -> str:
    params = re.search(r"\[(.*)\]$", nodeid)
    for part in params.group(1).split("-") if params else ():
        if part in FAMILIES:
            return part
    return "-"


def summarise(lines: list[dict]) -> dict:
    """{test: {family: [worst within error/bound (-1: none), least miss/bound, comparisons]}}."""
    table: dict = defaultdict(dict)
    for line in lines:
        test = re.sub(r"\[.*\]$", "", line["test"])
        row = table[test].setdefault(family_of(line["test"]), [-1.0, float("inf"), 0])
        ratio = line["error"] / line["bound"]
        if line["kind"] == "within":
            row[0] = max(row[0], ratio)
        else:
            row[1] = min(row[1], ratio)
        row[2] += 1
    return table


def main(path: str) -> None:
    with open(path) as lines:
        table = summarise([json.loads(line) for line in lines])
    print("| test | families | worst error / bound | least control miss / bound |")
    print("|---|---|---|---|")
    for test, rows in sorted(table.items()):
        worst = max(rows.items(), key=lambda r: r[1][0])
        least = min(rows.items(), key=lambda r: r[1][1])
        miss = "-" if least[1][1] == float("inf") else f"{least[1][1]:.3g} ({least[0]})"
        within = "-" if worst[1][0] < 0 else f"{worst[1][0]:.3g} ({worst[0]})"
        print(f"| {test} | {len(rows)} | {within} | {miss} |")


if __name__ == "__main__":
    main(sys.argv[1])
