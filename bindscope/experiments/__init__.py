"""Experiments composed from captures and ablations; each writes resumable result records.

Every experiment is one module ending with ``DEFINITION = Experiment(...)``
(``bindscope.experiments.kit.experiment``): its ``run(...)`` writes ``OUT/<name>/records.jsonl``
as prompts finish and its ``summarize(folder)`` rebuilds ``summary.json`` from those records
alone. ``bindscope.experiments.kit.registry`` finds them for the command line and summaries.
"""
