"""Hostile ModelEvaluation documents for the property-based tests (issue 15, hostile input).

A valid document (:data:`BASE`, which sets almost every field) is changed at one place into a
hostile value: a wrong type, a huge or deeply nested value, odd unicode, path traversal,
credentials in a URI, zero, negative or enormous numbers. The unit tests feed these to the
local validator, the cluster tests to the API server and the operator, and all of them check
the same things: a clear rejection naming a field, and no credential repeated.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from mlmodelscope.spec.document import field_path

BASE: dict[str, Any] = {
    "apiVersion": "mlmodelscope.io/v1alpha1",
    "kind": "ModelEvaluation",
    "metadata": {"name": "hostile", "labels": {"team": "ml"}},
    "spec": {
        "model": {
            "name": "digits",
            "version": "1",
            "uri": "https://models.example.com/digits.onnx",
            "sha256": "0" * 64,
            "format": "onnx",
            "inputs": [{"name": "input", "shape": [-1, 1, 8, 8], "dtype": "float32"}],
            "outputs": [{"name": "logits", "shape": [-1, 10]}],
            "credentialsSecretRef": {"name": "model-creds"},
        },
        "preprocessing": [
            {"scale": {"factor": 0.0625}},
            {"normalize": {"mean": [0.5], "std": [0.25]}},
            {"resize": {"height": 8, "width": 8}},
            {"layout": {"from": "HWC", "to": "CHW"}},
        ],
        "postprocessing": [{"softmax": {"axis": -1}}, {"topk": {"k": 3}}],
        "framework": {"name": "onnxruntime", "intraOpThreads": 1, "interOpThreads": 1},
        "dataset": {"type": "synthetic", "shape": [1, 8, 8], "size": 64, "limit": 32},
        "scenario": {
            "type": "Server",
            "targetQPS": 10,
            "batchSizes": [1, 2],
            "warmup": 2,
            "minQueryCount": 20,
            "minDuration": "1s",
            "latencyBound": "5ms",
            "latencyPercentiles": [50, 99],
            "repetitions": 1,
            "seed": 0,
            "stability": {"tolerancePercent": 10, "maxWindows": 3},
        },
        "hardware": {
            "device": "gpu",
            "gpus": 1,
            "gpuProduct": "NVIDIA-A100",
            "nodeSelector": {"pool": "gpu"},
            "tolerations": [
                {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}
            ],
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        },
        "tracing": {"level": "model", "sampling": 0.5},
        "timeout": "10m",
        "retries": 1,
        "ttlAfterFinished": "1h",
    },
}
"""A valid document that sets nearly every field, so that every field can be made hostile."""

SECRETS = ("s3cr3t-Pa55", "SIGn4ture-S3CRET", "t0k3n-S3CRET")
"""The credentials hostile URIs carry: none of them may ever be repeated."""

CREDENTIAL_URIS = (
    f"https://alice:{SECRETS[0]}@models.example.com/digits.onnx",
    f"https://models.example.com/digits.onnx?X-Amz-Signature={SECRETS[1]}&X-Amz-Expires=60",
    f"s3://bucket/digits.onnx?token={SECRETS[2]}",
    f"http://bob:{SECRETS[0]}@169.254.169.254/latest/meta-data/?sig={SECRETS[1]}",
)
TRAVERSAL_URIS = (
    "file:///etc/passwd",
    "file:///../../etc/passwd",
    "../../../../etc/shadow",
    "/etc/passwd",
    "pvc://../etc/passwd",
    "pvc://claim/../../etc/passwd",
    "pvc:///etc/passwd",
    "file://localhost/../../etc/passwd",
    "..\\..\\windows\\system32",
    "javascript:alert(1)",
)
UNICODE = (
    "\u202eevil.onnx",  # right-to-left override
    "a\x00b",  # NUL
    "model-\U0001f4a9",  # emoji
    "e\u0301\u0301\u0301",  # combining accents
    "\ufeffbom",
    "\u200b",  # zero-width space
    "ｍｏｄｅｌ",  # full-width
    "\ud7ff\ue000",
)
ENORMOUS = (0, -1, -(2**31), 2**31, 2**53 + 1, 2**63, -(2**63) - 1, 10**30, 1e308, -0.0)


def nested(depth: int, leaf: Any = 1, as_list: bool = False) -> Any:
    """A value nested ``depth`` levels deep, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = [value] if as_list else {"a": value}
    return value


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(ENORMOUS),
)
strings = st.one_of(
    st.text(max_size=64),
    st.sampled_from(UNICODE + CREDENTIAL_URIS + TRAVERSAL_URIS),
    st.integers(min_value=1000, max_value=300_000).map(lambda n: "x" * n),
)
containers = st.one_of(
    st.integers(min_value=1, max_value=1500).map(lambda d: nested(d)),
    st.integers(min_value=1, max_value=1500).map(lambda d: nested(d, as_list=True)),
    st.integers(min_value=33, max_value=200_000).map(lambda n: [1] * n),
    st.integers(min_value=65, max_value=20_000).map(lambda n: {f"k{i}": "v" for i in range(n)}),
    st.lists(scalars, max_size=5),
    st.dictionaries(st.text(max_size=10), scalars, max_size=5),
)
hostile_values = st.one_of(scalars, strings, containers)
"""Any hostile value: wrong type, odd or huge string, huge or deep container, extreme number."""


def paths(value: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Every place in ``value`` (dict keys and list indices), parents before children."""
    found: list[tuple[str | int, ...]] = []
    items: Any = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        found.append((*prefix, key))
        if isinstance(item, dict | list):
            found.extend(paths(item, (*prefix, key)))
    return found


PLACES = [p for p in paths(BASE) if p[0] in ("metadata", "spec")]
"""Every place under metadata and spec a hostile value can go."""


@dataclass(frozen=True)
class Hostile:
    """A document with one hostile change, and where it is."""

    document: dict[str, Any]
    place: tuple[str | int, ...]

    @property
    def field(self) -> str:
        return field_path(self.place)


def replace(place: tuple[str | int, ...], value: Any) -> Hostile:
    """BASE with ``place`` set to ``value`` (the value itself is not copied: it may be huge)."""
    document = copy.deepcopy(BASE)
    node: Any = document
    for part in place[:-1]:
        node = node[part]
    node[place[-1]] = value
    return Hostile(document, place)


@st.composite
def hostile_documents(draw: st.DrawFn) -> Hostile:
    """BASE with one place (or a new key beside it) set to a hostile value."""
    place = draw(st.sampled_from(PLACES))
    if len(place) > 1 and isinstance(place[-1], str) and draw(st.booleans()):
        keys = ["x", "ünïcode", "../x", "a" * 100_000, "\u202e", *CREDENTIAL_URIS]
        place = (*place[:-1], draw(st.sampled_from(keys)))
    return replace(place, draw(hostile_values))


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(ENORMOUS[:-2]),
)
json_values = st.one_of(
    json_scalars,
    st.text(max_size=40),
    st.sampled_from(UNICODE[2:] + CREDENTIAL_URIS + TRAVERSAL_URIS),  # no NUL, no RTL
    st.integers(min_value=3000, max_value=20_000).map(lambda n: "x" * n),
    st.integers(min_value=1, max_value=60).map(lambda d: nested(d)),
    st.integers(min_value=1, max_value=60).map(lambda d: nested(d, as_list=True)),
    st.integers(min_value=33, max_value=2000).map(lambda n: list(range(1, n + 1))),
    st.lists(json_scalars, max_size=4),
)
"""Hostile values a JSON request can carry to the API server (no NaN, no 1000-deep nesting:
kubectl and the API server's decoder stop those before any validation)."""


@st.composite
def hostile_requests(draw: st.DrawFn) -> Hostile:
    """BASE with one place under spec set to a value the API server can decode."""
    place = draw(st.sampled_from([p for p in PLACES if p[0] == "spec"]))
    if len(place) > 2 and isinstance(place[-1], str) and draw(st.integers(0, 4)) == 0:
        place = (*place[:-1], draw(st.sampled_from(["x", "../x", CREDENTIAL_URIS[0]])))
    return replace(place, draw(json_values))
