"""Result documents shaped for tests: what a run would have recorded on hardware this machine
lacks (an energy counter) or with settings it was not given (a price per node-hour), made by
the agent's own functions so the document stays what the agent writes."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from mlmodelscope.agent.cost import NodePrice, cost_section
from mlmodelscope.agent.energy import Method, window_energy
from mlmodelscope.agent.runner import headline

EFFICIENCY_KEYS = ("joules_per_inference", "energy_method", "cost_per_1000")
"""The efficiency fields of a ``results`` row."""


def metered(
    document: Mapping[str, Any],
    joules: Mapping[int, float],
    price_per_node_hour: float | None,
    *,
    method: Method = "rapl",
) -> dict[str, Any]:
    """A copy of the Succeeded ``document`` as if its energy counter (``method``) had read
    ``joules[batch size]`` per sample in each timed window (batch sizes not in ``joules``
    keep their energy) and the run had been given ``price_per_node_hour`` (None: no price):
    each measurement's ``energy`` and the document's ``cost`` from the agent's functions,
    each row's efficiency from :func:`~mlmodelscope.agent.runner.headline`."""
    made = copy.deepcopy(dict(document))
    price = None if price_per_node_hour is None else NodePrice(price_per_node_hour, "tests")
    made["cost"] = cost_section(price)
    for measurement, row in zip(made["measurements"], made["results"], strict=True):
        per_sample = joules.get(measurement["batch_size"])
        if per_sample is not None:
            samples = measurement["samples"]
            source = "GPU 0" if method == "nvml" else "package-0"
            energy = window_energy(method, per_sample * samples, 1.0, samples, source=source)
            measurement["energy"] = energy.to_dict()
        made_row = headline(measurement, made.get("accuracy"), made.get("task"), price)
        for key in EFFICIENCY_KEYS:
            row[key] = getattr(made_row, key)
    return made
