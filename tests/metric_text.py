"""Reading Prometheus' text exposition format in tests, with the client library's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples_of(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """{(sample name, labels): value} of every sample in ``text``."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    """The one sample named ``name`` whose labels include ``labels``."""
    matches = [
        v
        for (n, labs), v in samples_of(text).items()
        if n == name and all((k, val) in labs for k, val in labels.items())
    ]
    assert len(matches) == 1, (name, labels, matches)
    return matches[0]
