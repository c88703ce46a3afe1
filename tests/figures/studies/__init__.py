"""One module per study: its synthetic records and summary, and the figures drawn from them.

Each module defines ``synthetic_results()`` and ``expected_figures()``; ``synthetic.ALL`` is
the list of these modules, so a new study adds one here and edits nothing else.
"""
