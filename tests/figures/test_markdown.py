"""Number formatting for the report."""

from __future__ import annotations

from bindscope.figures import markdown as md


def test_numbers_estimates_and_pvalues():
    assert md.num(None) == md.DASH and md.num(float("nan")) == md.DASH
    assert md.num(3) == "3" and md.num(0.12345) == "0.123"
    est = {"value": 0.5, "low": 0.25, "high": 0.75}
    assert md.estimate(est) == "0.500 [0.250, 0.750]"
    assert md.estimate(est, 1, scale=100) == "50.0 [25.0, 75.0]"
    assert md.estimate({"value": 0.5, "low": None, "high": None}) == "0.500"
    assert md.estimate(None) == md.DASH
    assert md.pvalue(0.0004) == "4.0e-04" and md.pvalue(0.04) == "0.040"
    assert md.pvalue(0.0) == "0.000" and md.pvalue(None) == md.DASH


def test_nums_formats_each_key_and_dashes_a_missing_one():
    entry = {"n": 12, "mean": 0.25, "nan": float("nan")}
    assert md.nums(entry, "mean", "n", "absent", "nan") == [
        md.num(0.25),
        md.num(12),
        md.DASH,
        md.DASH,
    ]
    assert md.nums(entry) == []


def test_table_escapes_pipes_and_aligns():
    lines = md.table(["model", "n"], [["a|b", 3]], left=1)
    assert lines[0] == "| model | n |"
    assert lines[1] == "| :--- | ---: |"
    assert lines[2] == "| a\\|b | 3 |"
    assert md.heads([[0, 1], [2, 3]]) == "L0.H1, L2.H3"


def test_model_rows_gives_each_models_rows_in_order():
    models = {"a": {"tasks": ["x", "y"]}, "b": {"tasks": []}, "c": {"tasks": ["z"]}}

    def rows(label, entry):
        for task in entry["tasks"]:
            yield [label, task]

    assert md.model_rows(models, rows) == [["a", "x"], ["a", "y"], ["c", "z"]]
    assert md.model_rows({}, rows) == []


def test_model_table_reads_each_column_at_its_keys_or_from_the_entry():
    models = {"a": {"n": 3, "test": {"p": 0.04}}, "b": {"test": {}}}
    columns = (("n", md.num, "n"), ("p", md.pvalue, "test", "p"), ("keys", len))
    assert md.model_table(models, columns, left=2) == [
        "| model | n | p | keys |",
        "| :--- | :--- | ---: | ---: |",
        "| a | 3 | 0.040 | 2 |",
        f"| b | {md.DASH} | {md.DASH} | 1 |",
        "",
    ]
