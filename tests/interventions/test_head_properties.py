"""Property-based: any head spec is either valid pairs or a HeadSpecError."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bindscope.errors import HeadSpecError
from bindscope.interventions.head_checks import normalize_heads

scalars = (
    st.integers(-3, 8)
    | st.floats(allow_nan=True)
    | st.booleans()
    | st.text(max_size=3)
    | st.none()
    | st.integers(0, 5).map(np.int64)
    | st.booleans().map(np.bool_)
    | st.floats(0, 4).map(np.float32)
)
items = (
    st.tuples(scalars, scalars)
    | st.lists(scalars, max_size=3)
    | scalars
    | st.tuples(st.integers(0, 2), st.integers(0, 3))
)
specs = (
    st.none()
    | st.lists(items, max_size=5)
    | st.dictionaries(scalars, st.lists(scalars, max_size=3) | scalars, max_size=3)
    | scalars
)


@settings(max_examples=1000, deadline=None)
@given(heads=specs)
def test_head_specs_are_valid_pairs_or_a_head_spec_error(heads):
    try:
        pairs = normalize_heads(heads, n_layers=3, n_heads=4, model_name="tiny")
    except HeadSpecError as exc:
        assert "tiny" in str(exc)
        return
    assert list(pairs) == sorted(set(pairs))
    for layer, head in pairs:
        assert type(layer) is int and type(head) is int
        assert 0 <= layer < 3 and 0 <= head < 4
