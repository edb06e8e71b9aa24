"""The credentials an evaluation runs with, remembered so that nothing the agent repeats
shows them (:func:`mlmodelscope.contract.redact.remember_secrets`).

They are the credential-bearing parts of the spec's URIs (userinfo, presigned query values)
and the values of ``credentialsSecretRef``: the Job mounts that Secret as files at
:data:`~mlmodelscope.contract.wire.SECRET_DIR` beside passing it as environment variables,
so every key of it is known here, not only the ones boto3 reads.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from mlmodelscope.contract.redact import remember_secrets, secrets_in_tree, secrets_in_uri
from mlmodelscope.contract.wire import SECRET_DIR

CREDENTIAL_VARIABLES: Final = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
"""Environment variables that hold a credential whatever set them."""
ENDPOINT_VARIABLES: Final = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
"""Environment variables holding a URL whose userinfo is a credential."""
NOT_SECRET_KEYS: Final = frozenset(
    {*ENDPOINT_VARIABLES, "AWS_REGION", "AWS_DEFAULT_REGION", "MLMS_S3_ADDRESSING_STYLE"}
)
"""Secret keys that are settings, not credentials: shown as they are (an endpoint's userinfo
still counts)."""
MAX_SECRET_FILE: Final = 64 * 1024


def secret_folder(environ: Mapping[str, str] | None = None) -> Path:
    """Where the Secret of ``credentialsSecretRef`` is mounted (``$MLMS_SECRET_DIR``)."""
    env = os.environ if environ is None else environ
    return Path(env.get("MLMS_SECRET_DIR", SECRET_DIR))


def folder_secrets(folder: Path) -> set[str]:
    """The values of a Secret mounted as files, one per key (Kubernetes' ``..data`` links
    and other hidden entries skipped), less the settings in :data:`NOT_SECRET_KEYS`."""
    found: set[str] = set()
    with contextlib.suppress(OSError):
        for path in folder.iterdir():
            if path.name.startswith(".") or not path.is_file():
                continue
            with contextlib.suppress(OSError, UnicodeDecodeError):
                if path.stat().st_size > MAX_SECRET_FILE:
                    continue
                value = path.read_text()
                found |= secrets_in_uri(value.strip()) if path.name in NOT_SECRET_KEYS else {value}
    return found


def environment_secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """Credential values in the environment, and the userinfo of an S3 endpoint URL."""
    env = os.environ if environ is None else environ
    found = {env[name] for name in CREDENTIAL_VARIABLES if env.get(name)}
    for name in ENDPOINT_VARIABLES:
        found |= secrets_in_uri(env.get(name, ""))
    return found


def evaluation_secrets(spec: Any, environ: Mapping[str, str] | None = None) -> set[str]:
    """Every credential of a run of ``spec`` (the spec as submitted, a JSON-like tree)."""
    return (
        secrets_in_tree(spec)
        | environment_secrets(environ)
        | folder_secrets(secret_folder(environ))
    )


def remember_evaluation_secrets(spec: Any, environ: Mapping[str, str] | None = None) -> None:
    """Redact every credential of a run of ``spec`` from whatever this process repeats."""
    remember_secrets(evaluation_secrets(spec, environ))
