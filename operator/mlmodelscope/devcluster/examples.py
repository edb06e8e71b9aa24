"""What the dev cluster provides for the quick starts (docs/operator.md): a claim holding the
example models.

- **The claim** `mlmodelscope-examples` in `default` (and, on request, in another namespace:
  `mlms dev-cluster examples-claim`), bound to a hostPath PersistentVolume by the
  controller-manager's PV controller, as in any cluster (reserved both ways: the volume's
  `claimRef`, the claim's `volumeName`, `storageClassName: ""`). Its folder,
  `<run dir>/volumes/mlmodelscope-examples`, holds a copy of the digits CNN in every format
  (`ensure_digits_models()`), so a spec can say `uri: pvc://mlmodelscope-examples/digits.onnx`.
  A copy, so that nothing a pod does reaches the model cache.

No Role for the agent: the operator gives each evaluation a ServiceAccount of its own, allowed
to patch that evaluation's results ConfigMap alone ("The agent's side" in docs/operator.md).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from mlmodelscope.devcluster.rest import KubeREST

Log = Callable[[str], None]

NAMESPACE: Final = "default"
CLAIM: Final = "mlmodelscope-examples"
"""Name of both the PersistentVolumeClaim (in NAMESPACE) and the PersistentVolume."""
CLAIM_SIZE: Final = "1Gi"
LABELS: Final = {"app.kubernetes.io/part-of": "mlmodelscope-dev-cluster"}


def claim_folder(run_dir: Path) -> Path:
    """The host folder behind the examples claim."""
    return run_dir / "volumes" / CLAIM


def volume_name(namespace: str) -> str:
    """The volume behind a namespace's examples claim (one claim per volume)."""
    return CLAIM if namespace == NAMESPACE else f"{CLAIM}-{namespace}"


def volume_manifest(folder: Path, namespace: str = NAMESPACE) -> dict[str, Any]:
    """The hostPath PersistentVolume, reserved for the examples claim in ``namespace``."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name(namespace), "labels": dict(LABELS)},
        "spec": {
            "capacity": {"storage": CLAIM_SIZE},
            "accessModes": ["ReadOnlyMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": namespace,
                "name": CLAIM,
            },
            "hostPath": {"path": str(folder), "type": "Directory"},
        },
    }


def claim_manifest(namespace: str = NAMESPACE) -> dict[str, Any]:
    """The claim evaluations name in `pvc://mlmodelscope-examples/<file>`."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "namespace": namespace, "labels": dict(LABELS)},
        "spec": {
            "accessModes": ["ReadOnlyMany"],
            "storageClassName": "",
            "volumeName": volume_name(namespace),
            "resources": {"requests": {"storage": CLAIM_SIZE}},
        },
    }


def fill_claim_folder(folder: Path, log: Log) -> list[str]:
    """Copy the example digits models into ``folder`` (built once per machine, cached); the
    names copied, or none, said in the log, when they cannot be built here."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        from mlmodelscope.agent.digits import ensure_digits_models

        models = ensure_digits_models()
    except Exception as exc:  # frameworks missing, no training script, a failed build
        lines = [line for line in str(exc).splitlines() if line.strip()]
        cause = lines[-1] if lines else type(exc).__name__
        log(
            f"  example models: cannot build the digits models ({cause}); the claim {CLAIM} "
            "stays empty and evaluations of pvc://mlmodelscope-examples/... will fail with "
            "'not found'. Install what builds them, the `models` extra (pip install -e "
            "'.[models]' in a checkout), then run `mlms dev-cluster up` again."
        )
        return []
    shutil.copytree(models, folder, dirs_exist_ok=True)
    return sorted(p.name for p in folder.iterdir())


def provision(rest: KubeREST, folder: Path, namespace: str = NAMESPACE) -> None:
    """Create the volume and the claim in ``namespace`` (a fresh cluster has neither)."""
    objects = [
        ("/api/v1/persistentvolumes", volume_manifest(folder, namespace)),
        (f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", claim_manifest(namespace)),
    ]
    rest.create_absent(objects)


def claim_bound(rest: KubeREST, namespace: str = NAMESPACE) -> bool:
    """Whether the PV controller has bound the examples claim in ``namespace``."""
    claim = rest.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{CLAIM}")
    return bool((claim.get("status") or {}).get("phase") == "Bound")
