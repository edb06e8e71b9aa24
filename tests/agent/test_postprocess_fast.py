"""The fast postprocessing (softmax in the output dtype, partitioned top-k, ``timed``) gives
what the earlier float64 softmax and full stable sort gave: same top-k indices, probabilities
to float32 tolerance, NaN rows handled alike, ties to the lower index."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mlmodelscope.agent.processing import (
    PARTITION_MIN_CLASSES,
    Postprocessor,
    accuracy,
    softmax,
    topk,
)
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import PostprocessStep


def reference_topk(scores: np.ndarray, k: int) -> np.ndarray:
    """The implementation before the fast path: a full stable sort of the negated scores."""
    keyed = scores if np.issubdtype(scores.dtype, np.floating) else scores.astype(np.float64)
    return np.argsort(-keyed, axis=1, kind="stable")[:, : min(k, scores.shape[1])]


def reference_softmax(x: np.ndarray) -> np.ndarray:
    """The implementation before the fast path: float64 throughout, cast at the end."""
    dtype = np.float64 if x.dtype == np.float64 else np.float32
    with np.errstate(invalid="ignore"):
        shifted = x.astype(np.float64) - np.max(x, axis=-1, keepdims=True)
        e = np.exp(shifted)
        return (e / np.sum(e, axis=-1, keepdims=True)).astype(dtype)


def post(*docs: dict[str, Any]) -> Postprocessor:
    return Postprocessor([PostprocessStep.model_validate(d) for d in docs])


def with_ties_and_nans(rng: np.random.Generator, rows: int, classes: int) -> np.ndarray:
    """Random logits, some rows quantized (many exact ties, also across the top-k cut), a row
    with a NaN and a row of equal values."""
    x = rng.standard_normal((rows, classes)).astype(np.float32)
    x[::3] = np.round(x[::3])  # integers: ties everywhere, including at the k-th place
    x[1, 0] = np.nan
    x[2] = 0.5
    return x


@pytest.mark.parametrize("classes", [1, 3, 10, PARTITION_MIN_CLASSES, 1000])
@pytest.mark.parametrize("k", [1, 5])
def test_topk_matches_the_full_stable_sort(classes: int, k: int) -> None:
    rng = np.random.default_rng(classes * 10 + k)
    for dtype in (np.float32, np.float64, np.int64, np.uint8):
        x = rng.integers(0, 4, size=(40, classes)).astype(dtype)  # heavy ties
        assert np.array_equal(topk(x, k), reference_topk(x, k))
    x = with_ties_and_nans(rng, 40, classes)
    x[5, : max(classes - 2, 0)] = np.nan  # fewer than k numbers in the row
    x[6, :] = np.nan
    x[7, -1] = np.inf
    x[8, 0] = -np.inf
    assert np.array_equal(topk(x, k), reference_topk(x, k))
    assert np.array_equal(topk(-x, k), reference_topk(-x, k))


def test_topk_breaks_a_tie_at_the_cut_by_the_lower_index() -> None:
    row = np.zeros((1, 200), dtype=np.float32)
    row[0, [150, 7, 90]] = 2.0
    row[0, [199, 3, 120, 60]] = 1.0  # two of these four make the top 5
    assert topk(row, 5).tolist() == [[7, 90, 150, 3, 60]]


@pytest.mark.parametrize("shape", [(1, 10), (7, 10), (3, 1000), (2, 3, 4)])
def test_softmax_matches_the_float64_reference(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64, np.float16):
        x = (rng.standard_normal(shape) * 20).astype(dtype)
        got = softmax(x)
        want = reference_softmax(x)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-9)
        assert got is not x and np.array_equal(x, x.astype(dtype))  # input left alone


def test_softmax_nan_and_infinity_rows_as_before() -> None:
    x = np.array([[np.nan, 1.0, 2.0], [np.inf, 0.0, 1.0], [-np.inf, -np.inf, -np.inf]])
    with np.errstate(invalid="ignore"):
        got = softmax(x.astype(np.float32))
    want = reference_softmax(x.astype(np.float32))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).all()


@pytest.mark.parametrize("classes", [10, 1000])
def test_predictions_and_timed_path_agree_with_the_reference(classes: int) -> None:
    rng = np.random.default_rng(classes)
    logits = with_ties_and_nans(rng, 64, classes) * 4
    p = post({"softmax": {}}, {"topk": {"k": 5}})
    with np.errstate(invalid="ignore"):
        predictions = p([logits])
        timed = p.timed([logits])
    probabilities = reference_softmax(logits)
    best = reference_topk(probabilities, 5)
    assert predictions.scores is not None and predictions.topk_scores is not None
    np.testing.assert_allclose(predictions.scores, probabilities, rtol=2e-6, atol=1e-9)
    assert np.array_equal(predictions.topk_indices, best)
    assert np.array_equal(timed, best)
    assert np.array_equal(predictions.argmax, best[:, 0])
    np.testing.assert_allclose(
        predictions.topk_scores, np.take_along_axis(probabilities, best, axis=1), rtol=2e-6
    )
    labels = rng.integers(0, classes, size=64)
    reference = np.mean(best[:, 0] == labels), np.mean(np.any(best == labels[:, None], axis=1))
    assert accuracy(predictions, labels) == pytest.approx(reference)


def test_timed_handles_index_outputs_raw_scores_and_refuses_other_axes() -> None:
    assert post().timed([np.array([3, 1])]).tolist() == [[3], [1]]
    assert post({"topk": {"k": 2}}).timed(np.array([[0.1, 0.7, 0.2]])).tolist() == [[1, 2]]
    with pytest.raises(SpecError) as err:
        post({"softmax": {"axis": 0}}).timed([np.zeros((2, 3))])
    assert err.value.field == "spec.postprocessing[0].softmax.axis"
