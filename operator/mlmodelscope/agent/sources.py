"""Fetching models (and dataset files) from where a spec says they live.

Every fetch ends in a local path plus the SHA-256 actually computed, so a result always records
exactly which bytes were evaluated. Remote artifacts land in a content-addressed cache
(``$MLMS_CACHE_DIR/models/sha256/<hex>/``) and are downloaded once; a pinned ``sha256`` is
verified before anything is returned, and a mismatch leaves nothing in the cache.

Supported URIs: a plain path or ``file://`` (relative paths resolve against the spec file's
folder), ``http(s)://``, ``s3://bucket/key`` (boto3 from the ``s3`` extra; credentials and a
non-AWS endpoint from the environment, which the Job fills from ``credentialsSecretRef``) and
``pvc://claim/path`` (a volume the operator mounts under ``$MLMS_PVC_ROOT``). Archives (.tar,
.tar.gz, .tgz, .tar.bz2, .tar.xz, .zip) are unpacked into the cache, which is how a directory
model such as a SavedModel travels over http or s3.

Remote fetches follow the ``MLMS_FETCH_*`` policy (:mod:`mlmodelscope.contract.fetch`): hosts
checked before connecting (:mod:`.netguard`), size and time bounded (:mod:`.download`). A URI
is shown redacted in every message and in the cache's meta.json; it keys the cache unredacted
(hashed), so two URIs differing only in credentials stay two entries.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import shutil
import stat
import tarfile
import tempfile
import urllib.parse
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from mlmodelscope.agent import netguard
from mlmodelscope.agent.download import (
    CHUNK,
    USER_AGENT,
    Budget,
    copy_hashing,
    http_download,
)
from mlmodelscope.agent.download import FetchError as FetchError
from mlmodelscope.contract.fetch import FetchPolicy
from mlmodelscope.contract.paths import container_path
from mlmodelscope.contract.redact import redact_uri
from mlmodelscope.contract.wire import PVC_ROOT, SECRET_DIR
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import ModelSource
from mlmodelscope.spec.uris import parse_pvc_uri

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".zip")


class MissingDependencyError(RuntimeError):
    """An optional library a URI scheme needs is not installed; the message says what to install."""


class UnsafeArchiveError(SpecError):
    """An archive member would escape the extraction folder or is not a plain file/dir/link."""


@dataclass(frozen=True)
class FetchedModel:
    """A model (or data file) ready on local disk."""

    path: Path
    """The file, or the directory for directory models and unpacked archives."""
    sha256: str
    """Digest of ``path``: :func:`file_sha256` for a file, :func:`directory_sha256` for a
    directory (what ``mlms hash`` prints), always computed, never copied from the spec."""
    source: str
    """URI scheme it came from: file, pvc, http, https or s3."""
    cached: bool
    """True when it came from the local cache without contacting the source."""
    archive_sha256: str | None = None
    """For an unpacked archive: the digest of the archive file itself (also accepted as pin)."""


# ------------------------------------------------------------------------------------ digests


def _hash_stream(stream: BinaryIO) -> str:
    digest = hashlib.sha256()
    while chunk := stream.read(CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes (the same as ``sha256sum``)."""
    with Path(path).open("rb") as stream:
        return _hash_stream(stream)


def _tree_files(root: Path) -> Iterator[tuple[str, Path]]:
    """(relative posix path, path) of every file under ``root``: symlinks to files are followed,
    symlinked directories are not entered, empty directories do not count."""
    for folder, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in filenames:
            path = Path(folder, name)
            if path.is_file():
                yield path.relative_to(root).as_posix(), path


def directory_sha256(path: Path) -> str:
    """Digest of a directory model, independent of timestamps, permissions and walk order.

    SHA-256 over the lines ``"<file sha256>  <relative posix path>\\n"`` sorted by path, i.e.
    ``cd DIR && find . -type f -printf '%P\\n' | LC_ALL=C sort | xargs -d '\\n' sha256sum |
    sha256sum`` — so anyone can reproduce a pin without this tool.
    """
    root = Path(path)
    entries = sorted(_tree_files(root), key=lambda e: e[0].encode())
    digest = hashlib.sha256()
    for rel, file in entries:
        digest.update(f"{file_sha256(file)}  {rel}\n".encode())
    return digest.hexdigest()


def path_sha256(path: Path) -> str:
    """:func:`directory_sha256` for a directory, :func:`file_sha256` otherwise."""
    return directory_sha256(path) if Path(path).is_dir() else file_sha256(path)


# ------------------------------------------------------------------------------ local paths


def default_cache_dir() -> Path:
    """``$MLMS_CACHE_DIR``, else ``$XDG_CACHE_HOME/mlmodelscope``, else ~/.cache/mlmodelscope."""
    if env := os.environ.get("MLMS_CACHE_DIR"):
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "mlmodelscope"


def scheme_of(uri: str) -> str:
    """The URI's scheme, ``file`` for plain paths."""
    for scheme in ("https", "http", "s3", "pvc", "file"):
        if uri.startswith(f"{scheme}://"):
            return scheme
    return "file"


def _pvc_path(uri: str, field: str) -> Path:
    """Where the claim's volume is mounted, and the path inside it (never outside it)."""
    pvc = parse_pvc_uri(uri, field)
    root = os.environ.get("MLMS_PVC_ROOT", PVC_ROOT)
    return Path(container_path(str(PurePosixPath(root, pvc.claim, pvc.path))))


def local_path(uri: str, *, base_dir: Path | None = None, field: str = "spec.model.uri") -> Path:
    """The local path a file://, pvc:// or plain-path URI refers to (not checked to exist).

    Relative paths resolve against ``base_dir`` (the spec file's folder) or the working
    directory; absolute ones go through :func:`~mlmodelscope.contract.paths.container_path`.
    """
    scheme = scheme_of(uri)
    if scheme == "pvc":
        return _pvc_path(uri, field)
    if scheme != "file":
        raise SpecError(field, f"{uri!r} is not a local path")
    text = uri
    if text.startswith("file://"):
        text = urllib.parse.unquote(text.removeprefix("file://"))
        if text.startswith("localhost/"):
            text = text.removeprefix("localhost")
    path = Path(text).expanduser()
    if path.is_absolute():
        return Path(container_path(str(path)))
    return (base_dir if base_dir is not None else Path.cwd()) / path


def _require_exists(path: Path, uri: str, field: str) -> None:
    if not path.exists():
        where = f" (resolved to {path})" if str(path) != uri else ""
        hint = (
            "check that the claim is mounted and holds that path"
            if uri.startswith("pvc://")
            else "relative paths resolve against the spec file's folder; in a cluster use "
            "pvc://, https:// or s3://"
        )
        raise SpecError(field, f"{uri!r} not found{where}; {hint}")


# ---------------------------------------------------------------------------------- archives


def is_archive(name: str) -> bool:
    """Whether a file name says it is an archive this module unpacks."""
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def _check_member_name(name: str, archive: str, field: str) -> PurePosixPath:
    posix = PurePosixPath(name.replace("\\", "/"))
    if posix.is_absolute() or (posix.parts and posix.parts[0].endswith(":")):
        raise UnsafeArchiveError(field, f"{archive}: member {name!r} has an absolute path")
    if ".." in posix.parts:
        raise UnsafeArchiveError(field, f"{archive}: member {name!r} contains '..'")
    return posix


def _inside(target: PurePosixPath) -> bool:
    """Whether a normalized relative path stays inside the extraction root."""
    depth = 0
    for part in target.parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part not in (".", ""):
            depth += 1
    return not target.is_absolute()


def _extract_tar(archive: Path, dest: Path, field: str) -> None:
    label = archive.name
    with tarfile.open(archive, "r:*") as tar:
        members = tar.getmembers()
        for m in members:
            name = _check_member_name(m.name, label, field)
            if m.issym():
                link = PurePosixPath(m.linkname)
                if link.is_absolute() or not _inside(name.parent / link):
                    raise UnsafeArchiveError(
                        field, f"{label}: symlink {m.name!r} -> {m.linkname!r} points outside"
                    )
            elif m.islnk():
                link = PurePosixPath(m.linkname)
                if link.is_absolute() or not _inside(link):
                    raise UnsafeArchiveError(
                        field, f"{label}: hard link {m.name!r} -> {m.linkname!r} points outside"
                    )
            elif not (m.isfile() or m.isdir()):
                raise UnsafeArchiveError(
                    field, f"{label}: member {m.name!r} is a device, FIFO or other special file"
                )
        # The data filter (Python >= 3.11.4) re-checks all of the above and drops set-uid bits.
        tar.extractall(dest, members=members, filter="data")


def _extract_zip(archive: Path, dest: Path, field: str) -> None:
    label = archive.name
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            _check_member_name(info.filename, label, field)
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise UnsafeArchiveError(
                    field, f"{label}: member {info.filename!r} is a symlink; use a .tar.gz"
                )
            # Zips from non-Unix tools carry no file type bits (S_IFMT 0): plain files.
            if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise UnsafeArchiveError(
                    field, f"{label}: member {info.filename!r} is a device or special file"
                )
        zf.extractall(dest)


def extract_archive(archive: Path, dest: Path, *, field: str = "spec.model.uri") -> Path:
    """Unpack ``archive`` into the new folder ``dest``, refusing unsafe members.

    Members with absolute paths or ``..``, links pointing outside ``dest`` and device files
    raise :class:`UnsafeArchiveError` naming the member, before anything is written. Returns
    the model root: the single top-level folder if the archive holds exactly one, else ``dest``.
    """
    dest.mkdir(parents=True, exist_ok=False)
    try:
        if archive.name.lower().endswith(".zip"):
            _extract_zip(archive, dest, field)
        else:
            _extract_tar(archive, dest, field)
    except tarfile.FilterError as exc:
        raise UnsafeArchiveError(field, f"{archive.name}: {exc}") from exc
    except tarfile.TarError as exc:
        raise SpecError(field, f"{archive.name} is not a readable tar archive: {exc}") from exc
    except zipfile.BadZipFile as exc:
        raise SpecError(field, f"{archive.name} is not a readable zip archive: {exc}") from exc
    except OSError as exc:  # members that clash: a file named like a folder, '.' as a file
        where = _relative(exc.filename, dest)
        raise UnsafeArchiveError(
            field, f"{archive.name}: cannot unpack member {where!r}: {exc.strerror or exc}"
        ) from exc
    return _archive_root(dest)


def _relative(filename: object, dest: Path) -> str:
    """An OSError's file as a member path (the extraction folder is the agent's business)."""
    text = os.fsdecode(filename) if isinstance(filename, str | bytes) else "?"
    with contextlib.suppress(ValueError):
        return Path(text).relative_to(dest).as_posix()
    return Path(text).name


def _archive_root(dest: Path) -> Path:
    entries = [p for p in dest.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return dest


# ------------------------------------------------------------------------------------- cache


class _Cache:
    """Content-addressed store: ``<root>/<kind>/sha256/<hex>/`` holds one artifact + meta.json.

    Entries appear by atomic rename of a finished temp folder, so readers never see partial
    downloads and concurrent agents on a node sharing the cache cannot corrupt each other.
    ``<root>/<kind>/index/`` maps other keys (a URI, an unpacked tree's digest) to entries.
    """

    def __init__(self, root: Path, kind: str) -> None:
        self.base = root / kind
        self.entries = self.base / "sha256"
        self.index = self.base / "index"
        self.tmp = self.base / "tmp"

    def entry(self, digest: str) -> Path:
        return self.entries / digest

    def get(self, digest: str | None) -> dict[str, Any] | None:
        """The meta of the complete entry ``digest``, if there is one."""
        if not digest:
            return None
        try:
            meta: dict[str, Any] = json.loads((self.entry(digest) / "meta.json").read_text())
        except (OSError, json.JSONDecodeError):
            return None
        return meta if (self.entry(digest) / meta["path"]).exists() else None

    def resolve(self, key: str) -> str | None:
        """The entry digest an index key points to."""
        try:
            return (self.index / _alias_name(key)).read_text().strip()
        except OSError:
            return None

    def add_alias(self, key: str, digest: str) -> None:
        self.index.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.index, prefix=".alias-")
        with os.fdopen(fd, "w") as out:
            out.write(digest)
        Path(tmp).replace(self.index / _alias_name(key))

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        """A temp folder inside the cache (same filesystem, so rename is atomic), always removed."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(dir=self.tmp))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            with contextlib.suppress(OSError):
                self.tmp.rmdir()

    def commit(self, staged: Path, digest: str, meta: dict[str, Any]) -> dict[str, Any]:
        """Publish a staged folder as entry ``digest``; a concurrent winner is kept instead."""
        (staged / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
        self.entries.mkdir(parents=True, exist_ok=True)
        try:
            staged.rename(self.entry(digest))
        except OSError:
            if (winner := self.get(digest)) is None:
                raise
            return winner
        return meta


def _alias_name(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


# ---------------------------------------------------------------------------------- transport


CREDENTIALS_FIELD = "spec.model.credentialsSecretRef"
"""Where s3:// credentials come from: the Job passes that Secret's keys as environment
variables (``envFrom``), and every s3:// URI of the evaluation (model, dataset, labels) uses
them."""

S3_ADDRESSING_STYLES = ("path", "virtual", "auto")
_S3_NOT_FOUND = frozenset({"NoSuchKey", "NoSuchBucket", "NotFound", "404"})
_S3_DENIED = frozenset(
    {
        "AccessDenied",
        "403",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidToken",
        "ExpiredToken",
        "InvalidClientTokenId",
        "AuthorizationHeaderMalformed",
    }
)


def _load_boto3() -> Any:
    try:
        return importlib.import_module("boto3")
    except ImportError as exc:
        raise MissingDependencyError(
            "s3:// URIs need boto3, which is not installed; install it with: "
            "pip install 'mlmodelscope[s3]'"
        ) from exc


def _secret_credentials() -> dict[str, str]:
    """Keys from a Secret mounted as a volume (one file per key) at ``$MLMS_SECRET_DIR``, used
    only when the environment has none.

    The operator's Job passes ``credentialsSecretRef`` as environment variables (``envFrom``),
    which boto3 reads itself; the folder serves a container started by hand with the Secret
    mounted, or ``mlms run`` next to a copy of it.
    """
    if os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_SHARED_CREDENTIALS_FILE"):
        return {}
    folder = Path(os.environ.get("MLMS_SECRET_DIR", SECRET_DIR))
    names = {
        "AWS_ACCESS_KEY_ID": "aws_access_key_id",
        "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
        "AWS_SESSION_TOKEN": "aws_session_token",
    }
    found = {}
    for env_name, arg in names.items():
        with contextlib.suppress(OSError):
            found[arg] = (folder / env_name).read_text().strip()
    return found if "aws_access_key_id" in found else {}


def s3_endpoint() -> str | None:
    """The S3 endpoint for a non-AWS store: ``$AWS_ENDPOINT_URL_S3``, else ``$AWS_ENDPOINT_URL``
    (botocore's own names), else None for AWS itself."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def _check_endpoint(endpoint: str, policy: FetchPolicy) -> None:
    """Refuse an S3 endpoint the fetch policy blocks (``http://169.254.169.254`` would make
    boto3 fetch instance metadata as the "object"). botocore connects by itself, so this checks
    the addresses the name has now; a name that changes them between this check and botocore's
    own lookup is not caught (http(s) URIs have no such gap)."""
    shown = f"S3 endpoint {redact_uri(endpoint)} (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL)"
    try:
        parts = urllib.parse.urlsplit(endpoint)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise SpecError(CREDENTIALS_FIELD, f"{shown} is not a valid URL: {exc}") from None
    host = parts.hostname or ""
    try:
        netguard.checked_addresses(host, port, policy, field=CREDENTIALS_FIELD, shown=shown)
    except OSError as exc:
        raise FetchError(f"{shown}: cannot resolve {host}: {exc}") from exc


def _s3_client(boto3: Any, policy: FetchPolicy) -> Any:
    """An S3 client from the environment: credentials (env, mounted Secret, boto3's chain),
    endpoint and region (``AWS_REGION``/``AWS_DEFAULT_REGION``, else us-east-1).

    With a custom endpoint the bucket goes into the path (``http://host:9000/bucket/key``),
    which MinIO, Ceph and other self-hosted stores serve without wildcard DNS;
    ``MLMS_S3_ADDRESSING_STYLE`` (path, virtual or auto) overrides that.
    """
    endpoint = s3_endpoint()
    style = os.environ.get("MLMS_S3_ADDRESSING_STYLE") or ("path" if endpoint else "auto")
    if style not in S3_ADDRESSING_STYLES:
        raise SpecError(
            CREDENTIALS_FIELD,
            f"MLMS_S3_ADDRESSING_STYLE={style!r}; expected path, virtual or auto",
        )
    if endpoint is not None and urllib.parse.urlparse(endpoint).scheme not in ("http", "https"):
        raise SpecError(
            CREDENTIALS_FIELD,
            f"S3 endpoint {redact_uri(endpoint)!r} (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL) "
            "is not an http:// or https:// URL",
        )
    if endpoint is not None:
        _check_endpoint(endpoint, policy)
    config = importlib.import_module("botocore.config").Config(
        s3={"addressing_style": style},
        connect_timeout=policy.timeout_s,
        read_timeout=policy.timeout_s,
        retries={"mode": "standard", "max_attempts": 3},
        user_agent_extra=USER_AGENT,
    )
    session = boto3.session.Session(**_secret_credentials())
    return session.client("s3", endpoint_url=endpoint, config=config)


def _s3_error(uri: str, field: str, exc: Exception) -> Exception:
    """Classify a boto3 failure: what the user must fix is a :class:`SpecError` naming the
    field to fix, the rest (5xx, throttling, network) a retryable :class:`FetchError`."""
    kind = type(exc).__name__
    response = getattr(exc, "response", None)
    response = response if isinstance(response, dict) else {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    where = f" at {redact_uri(endpoint)}" if (endpoint := s3_endpoint()) else ""
    uri = redact_uri(uri)
    if code in _S3_NOT_FOUND:
        return SpecError(field, f"{uri!r} not found{where} ({code}); check the bucket and key")
    if code in _S3_DENIED:
        return SpecError(
            CREDENTIALS_FIELD,
            f"access to {uri!r}{where} denied ({code}); check AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY in the Secret it names",
        )
    if kind in ("NoCredentialsError", "PartialCredentialsError"):
        return SpecError(
            CREDENTIALS_FIELD,
            f"no AWS credentials for {uri!r}; set it to a Secret with AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (and AWS_ENDPOINT_URL_S3 for a store other than AWS)",
        )
    if isinstance(status, int) and 400 <= status < 500 and status not in (408, 429):
        return SpecError(field, f"GET {uri}{where} failed: HTTP {status} {code}: {exc}")
    return FetchError(f"GET {uri}{where} failed: {kind}: {exc}", status=status)


def _s3_download(uri: str, out: BinaryIO, field: str, policy: FetchPolicy) -> tuple[str, int]:
    shown = redact_uri(uri)
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not bucket or not key or key.endswith("/"):
        raise SpecError(
            field,
            f"{shown!r} must name one object, s3://bucket/key; pack a directory model "
            "(SavedModel) as a .tar.gz",
        )
    client = _s3_client(_load_boto3(), policy)
    errors = importlib.import_module("botocore.exceptions")
    budget = Budget(policy, shown, field)
    try:
        response = client.get_object(Bucket=bucket, Key=key)
        expected = response.get("ContentLength")
        with contextlib.closing(response["Body"]) as body:
            budget.declare(expected if isinstance(expected, int) else None)
            digest, size = copy_hashing(body.iter_chunks(CHUNK), out, budget)
    except (errors.BotoCoreError, errors.ClientError) as exc:
        raise _s3_error(uri, field, exc) from exc
    if isinstance(expected, int) and expected != size:
        raise FetchError(f"GET {shown}: got {size} bytes, ContentLength said {expected}")
    return digest, size


_DOWNLOADERS: dict[str, Callable[[str, BinaryIO, str, FetchPolicy], tuple[str, int]]] = {
    "http": http_download,
    "https": http_download,
    "s3": _s3_download,
}


# ------------------------------------------------------------------------------------- fetch


def _mismatch(uri: str, expected: str, actual: list[str], field: str, path: str) -> SpecError:
    got = " or ".join(dict.fromkeys(actual))
    return SpecError(
        field,
        f"{redact_uri(uri)!r} has sha256 {got}, but the spec expects {expected}; if the model "
        f"changed on purpose, set {field} to the new digest (`mlms hash {path}` prints it), "
        "otherwise fix the source or the URI",
    )


def _basename(uri: str) -> str:
    try:
        path = urllib.parse.urlparse(uri).path if "://" in uri else uri
    except ValueError:  # not a valid URL: the download says so, naming the field
        return "model"
    name = PurePosixPath(urllib.parse.unquote(path)).name
    return name if name not in ("", ".", "..") else "model"


def _publish(
    cache: _Cache,
    staged: Path,
    artifact: Path,
    digest: str,
    *,
    uri: str,
    expected: str | None,
    fields: tuple[str, str],
) -> dict[str, Any]:
    """Verify an artifact (unpacking archives into ``staged``), then publish it as an entry.

    A mismatch raises before the commit, so the staged copy is discarded with its folder.
    """
    uri_field, sha_field = fields
    meta: dict[str, Any] = {"uri": redact_uri(uri), "sha256": digest}
    if is_archive(artifact.name):
        root = extract_archive(artifact, staged / "tree", field=uri_field)
        if artifact.parent == staged:
            artifact.unlink()
        tree = directory_sha256(root)
        if expected is not None and expected not in (digest, tree):
            raise _mismatch(uri, expected, [tree, digest], sha_field, artifact.name)
        meta.update(path=root.relative_to(staged).as_posix(), tree_sha256=tree, archive=True)
    else:
        if expected is not None and expected != digest:
            raise _mismatch(uri, expected, [digest], sha_field, artifact.name)
        meta.update(path=artifact.name, archive=False)
    meta = cache.commit(staged, digest, meta)
    if meta.get("archive"):
        cache.add_alias(f"sha256:{meta['tree_sha256']}", digest)
    return meta


def _from_meta(cache: _Cache, meta: dict[str, Any], *, cached: bool, source: str) -> FetchedModel:
    entry = cache.entry(meta["sha256"])
    if meta.get("archive"):
        return FetchedModel(
            path=entry / meta["path"],
            sha256=meta["tree_sha256"],
            source=source,
            cached=cached,
            archive_sha256=meta["sha256"],
        )
    return FetchedModel(
        path=entry / meta["path"], sha256=meta["sha256"], source=source, cached=cached
    )


def fetch_uri(
    uri: str,
    *,
    sha256: str | None = None,
    base_dir: Path | None = None,
    cache_dir: Path | None = None,
    kind: str = "models",
    uri_field: str = "spec.model.uri",
    sha256_field: str = "spec.model.sha256",
) -> FetchedModel:
    """Fetch any supported URI to local disk, verify it and return where it is.

    Local files and folders are used in place (hashed, not copied); local archives and every
    remote artifact go through the cache under ``kind``. ``sha256`` is matched against the
    artifact, or for an archive against either the archive file or the unpacked folder.
    """
    source = scheme_of(uri)
    root = cache_dir if cache_dir is not None else default_cache_dir()
    cache = _Cache(root, kind)
    fields = (uri_field, sha256_field)

    if source in ("file", "pvc"):
        path = local_path(uri, base_dir=base_dir, field=uri_field)
        _require_exists(path, uri, uri_field)
        if not (path.is_file() and is_archive(path.name)):
            digest = path_sha256(path)
            if sha256 is not None and sha256 != digest:
                raise _mismatch(uri, sha256, [digest], sha256_field, str(path))
            return FetchedModel(path=path, sha256=digest, source=source, cached=False)
        # A local archive is unpacked once into the cache, keyed by the archive's digest.
        digest = file_sha256(path)
        if (meta := cache.get(digest)) is not None:
            fetched = _from_meta(cache, meta, cached=True, source=source)
            if sha256 is not None and sha256 not in (fetched.sha256, digest):
                raise _mismatch(uri, sha256, [fetched.sha256, digest], sha256_field, str(path))
            return fetched
        with cache.staging() as staged:
            meta = _publish(cache, staged, path, digest, uri=uri, expected=sha256, fields=fields)
        return _from_meta(cache, meta, cached=False, source=source)

    download = _DOWNLOADERS[source]
    if sha256 is not None:
        meta = cache.get(sha256) or cache.get(cache.resolve(f"sha256:{sha256}"))
    else:
        meta = cache.get(cache.resolve(f"uri:{uri}"))
    if meta is not None:
        return _from_meta(cache, meta, cached=True, source=source)
    with cache.staging() as staged:
        artifact = staged / _basename(uri)
        try:
            with artifact.open("wb") as out:
                digest, _ = download(uri, out, uri_field, FetchPolicy.from_env(os.environ))
        except FetchError as exc:  # still retryable, but the message names the field
            raise FetchError(f"{uri_field}: {exc}", status=exc.status) from exc
        meta = _publish(cache, staged, artifact, digest, uri=uri, expected=sha256, fields=fields)
    cache.add_alias(f"uri:{uri}", digest)
    return _from_meta(cache, meta, cached=False, source=source)


def fetch_model(
    model: ModelSource, *, base_dir: Path | None = None, cache_dir: Path | None = None
) -> FetchedModel:
    """Fetch ``spec.model`` to local disk and verify ``spec.model.sha256`` if pinned.

    Raises :class:`SpecError` for what the user must fix (missing file, 404, digest mismatch,
    unsafe archive) and :class:`FetchError` for transient transport failures.
    """
    return fetch_uri(model.uri, sha256=model.sha256, base_dir=base_dir, cache_dir=cache_dir)
