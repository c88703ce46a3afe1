"""The kit the studies share: options, the run skeleton, records, chunks, summaries, head sets.

The studies are the modules of ``bindscope.experiments`` (one module each, plus a
``*_summary`` module where the summary is large); this package holds what they share and
never imports a study (an import-linter contract in ``pyproject.toml`` says so).
"""
