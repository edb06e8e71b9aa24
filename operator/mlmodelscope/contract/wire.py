"""The fixed names and numbers of the operator ↔ agent protocol.

The operator builds a Job whose one container runs ``mlms agent`` with the spec mounted at
:data:`SPEC_FILE`; the agent publishes its result into the ConfigMap the operator created
(keys :data:`RESULT_KEY`, :data:`SUMMARY_KEY`) and into its termination message, and exits
with one of the codes below, which the Job's podFailurePolicy reads.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
"""The run failed; a retry may help (the Job retries up to ``spec.retries``)."""
EXIT_SPEC_ERROR: Final = 3
"""The spec cannot work as written (bad field, model not found, digest mismatch): the Job's
podFailurePolicy fails the Job at once."""

PRICE_ENV: Final = "MLMS_PRICE_PER_NODE_HOUR"
"""What the node running the agent costs per hour (USD), for its cost per 1,000 inferences."""
PRICE_SOURCE_ENV: Final = "MLMS_PRICE_SOURCE"
"""Where that price came from, recorded beside the cost."""
RESULT_KEY: Final = "result.json"
"""Results ConfigMap key: the result document, raw latency arrays removed to fit."""
SUMMARY_KEY: Final = "summary.json"
"""Results ConfigMap key: the compact :class:`~mlmodelscope.contract.result.EvaluationSummary`."""
TERMINATION_LIMIT: Final = 4096
"""The kubelet truncates termination messages beyond 4096 bytes."""
CONFIGMAP_LIMIT: Final = 1_048_576
"""Total bytes of a ConfigMap's data."""
CONFIGMAP_HEADROOM: Final = 16_384
"""Room left for the summary and object metadata."""

CONTAINER_NAME: Final = "agent"
"""The evaluation container, whose termination message holds the summary."""
SPEC_DIR: Final = "/etc/mlmodelscope/spec"
SPEC_KEY: Final = "evaluation.yaml"
RESULTS_DIR: Final = "/var/run/mlmodelscope/results"
TERMINATION_LOG: Final = "/dev/termination-log"
PVC_ROOT: Final = "/var/run/mlmodelscope/pvc"
"""``pvc://<claim>/<path>`` is mounted at ``<PVC_ROOT>/<claim>/<path>`` (``$MLMS_PVC_ROOT``
overrides it in the agent)."""
SECRET_DIR: Final = "/var/run/secrets/mlmodelscope/model-credentials"
"""Where the Job mounts the Secret of ``credentialsSecretRef`` (read-only, one file per key):
the agent redacts each value from what it writes, and reads AWS keys there when the
environment has none (``$MLMS_SECRET_DIR`` overrides it)."""


def unix_time(value: Any) -> float | None:
    """Seconds since the epoch of an RFC 3339 timestamp ("...Z" or an offset), as Kubernetes
    and the agent write them; None for anything else (a bad value is not worth an exception)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
