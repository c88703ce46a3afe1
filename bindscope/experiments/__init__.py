"""Experiments composed from captures and ablations; each writes resumable result records."""
