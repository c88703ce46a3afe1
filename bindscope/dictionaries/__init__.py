"""Sparse dictionaries (SAEs) on bindscope's sites: training, quality."""
