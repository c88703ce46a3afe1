"""The engine that runs inside an nnsight trace, locally or shipped by value to NDIF.

Every module here imports only ``torch``, ``math`` and its siblings, and is listed in
``bindscope.remote.shipping.SHIPPED_MODULES`` (``tests/remote/test_shipping.py`` checks
both). Trace bodies call it through ``bindscope.interventions.ops``.
"""
