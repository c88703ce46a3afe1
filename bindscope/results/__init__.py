"""Results on disk, and reading them back.

Result records (JSON Lines) and their schema, the one-writer lock, the settings a folder
was made with, model labels, and summaries.

Experiments write through this layer and figures read through it; it runs no model.
"""
