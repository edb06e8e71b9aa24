"""Model inputs from a dataset's named fields: each of ``spec.model.inputs`` takes the field
it names (``field``, else its own name), checked against its dtype and shape before anything
is timed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import DType, TensorSpec

INTEGER_DTYPES = {DType.INT64: np.int64, DType.INT32: np.int32}


def model_feeds(inputs: Sequence[TensorSpec], fields: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """One array per model input, in ``inputs`` order. Token fields are int64; an input
    declared int32 gets them cast (ids fit), bool gets the mask as bool; any other dtype, a
    field the dataset does not have, or a shape the arrays do not fit is a :class:`SpecError`
    on that input."""
    feeds = []
    for i, tensor in enumerate(inputs):
        where = f"spec.model.inputs[{i}]"
        name = tensor.field or tensor.name
        if name not in fields:
            raise SpecError(
                f"{where}.field" if tensor.field else f"{where}.name",
                f"the dataset has no field {name!r} for input {tensor.name!r}; it has "
                f"{', '.join(sorted(fields))} (set field: to one of them)",
            )
        values = fields[name]
        if tensor.dtype in INTEGER_DTYPES:
            values = values.astype(INTEGER_DTYPES[tensor.dtype], copy=False)
        elif tensor.dtype == DType.BOOL:
            values = values.astype(np.bool_)
        else:
            raise SpecError(
                f"{where}.dtype",
                f"input {tensor.name!r} is {tensor.dtype.value}, but the dataset's {name} are "
                "integer token ids: declare int64, int32 or (for a mask) bool",
            )
        model = tuple(tensor.shape[1:])
        have = values.shape[1:]
        fits = len(model) == len(have) and all(
            m in (-1, h) for m, h in zip(model, have, strict=True)
        )
        if not fits:
            raise SpecError(
                f"{where}.shape",
                f"input {tensor.name!r} takes {list(tensor.shape)} (batch first) but the "
                f"dataset's {name} are {[-1, *have]}; match dataset.maxLength to the model's "
                "sequence length or declare it -1",
            )
        feeds.append(np.ascontiguousarray(values))
    return feeds
