"""What the operator and the agent agree on, owned by neither.

``result`` (the result document, its rows and the compact summary as pydantic models),
``wire`` (ConfigMap keys, exit codes, size limits, mount points), ``kube`` (one Kubernetes
client for both sides), ``otel`` (the OpenTelemetry variables both honour), ``paths``
(the one hook that maps container paths for the dev cluster's exec pods), ``fetch`` (the
``MLMS_FETCH_*`` download policy the operator passes and the agent reads) and ``redact``
(credentials in URIs, replaced in everything either side repeats). It depends on
``mlmodelscope.spec`` and nothing else of this package: the agent and the controller each
depend on it, never on each other.
"""
