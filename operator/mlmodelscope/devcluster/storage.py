"""What the dev cluster provides for stateful workloads: a default StorageClass whose volumes
are host folders, so a chart's claims bind as on a cloud cluster (the bundled PostgreSQL's
StatefulSet claim, docs/operator.md's install quick start).

No provisioner runs: the cluster starts with `VOLUMES` hostPath PersistentVolumes of that class,
each a folder ``<run dir>/volumes/data-<i>`` anyone may write (a pod's user owns what it
creates there: hostPath takes no fsGroup), and the PV controller binds a claim of the class to
a free one at once. The reclaim policy is Retain: a claim outlives ``helm uninstall`` and its
data outlives the claim, until the cluster stops.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from mlmodelscope.devcluster.rest import KubeREST

STORAGE_CLASS: Final = "dev-hostpath"
VOLUMES: Final = 4
VOLUME_SIZE: Final = "8Gi"
"""What each volume says it holds (a host folder has no quota): the chart's default claim."""
LABELS: Final = {"app.kubernetes.io/part-of": "mlmodelscope-dev-cluster"}


def volume_folder(run_dir: Path, index: int) -> Path:
    return run_dir / "volumes" / f"data-{index}"


def storage_class_manifest() -> dict[str, Any]:
    """The cluster's default StorageClass: pre-made volumes, bound as soon as claimed."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "labels": dict(LABELS),
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "kubernetes.io/no-provisioner",
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "Immediate",
    }


def volume_manifest(folder: Path, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"dev-data-{index}", "labels": dict(LABELS)},
        "spec": {
            "capacity": {"storage": VOLUME_SIZE},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": STORAGE_CLASS,
            "hostPath": {"path": str(folder), "type": "Directory"},
        },
    }


def provision(rest: KubeREST, run_dir: Path) -> list[Path]:
    """Create the folders, the StorageClass and the volumes; the folders."""
    folders = []
    objects: list[tuple[str, dict[str, Any]]] = [
        ("/apis/storage.k8s.io/v1/storageclasses", storage_class_manifest())
    ]
    for index in range(VOLUMES):
        folder = volume_folder(run_dir, index)
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o1777)  # any pod user may create its data here, as in /tmp
        folders.append(folder)
        objects.append(("/api/v1/persistentvolumes", volume_manifest(folder, index)))
    rest.create_absent(objects)
    return folders
