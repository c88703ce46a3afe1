"""The engine that runs inside an nnsight trace, locally or shipped by value to NDIF.

Torch, math and its siblings only; every module is in ``remote.shipping.SHIPPED_MODULES``.
"""
