"""Build the control-plane binaries from pinned Go modules into a cache outside the repo.

Nothing here is committed or downloaded prebuilt: the wrapper go.mod files are generated into
the cache, `go` compiles them (under `nice`, this is a 2-core machine), and a stamp per
component makes a second run a no-op that takes milliseconds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from mlmodelscope.devcluster import versions as v
from mlmodelscope.devcluster.buildlock import build_lock

Log = Callable[[str], None]

KUBE_MODULE = "mlmodelscope.local/devcluster/kubernetes"
ETCD_MODULE = "mlmodelscope.local/devcluster/etcd"
KUEUE_MODULE = "mlmodelscope.local/devcluster/kueue"
PAUSE_MODULE = "mlmodelscope.local/devcluster/pause"
KUBE_BUILT: Final = (*v.KUBE_COMPONENTS, "kubelet")
"""Everything built from the k8s.io/kubernetes wrapper module."""
PAUSE_MAIN: Final = """// Command pause holds a pod sandbox's namespaces: it waits for SIGINT or
// SIGTERM and, as PID 1 of a shared PID namespace, reaps re-parented children.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	child := make(chan os.Signal, 16)
	signal.Notify(child, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			return
		case <-child:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
"""
NO_DWARF: Final = "-gcflags=all=-dwarf=false"
"""Every Go build compiles without the debug information its ``-ldflags -s -w`` strips at the
link anyway: the same program for less compile work. Not in a fingerprint: a binary built
with DWARF compiled in stays valid."""
BUILD_DATE = "2026-01-01T00:00:00Z"
"""Fixed so the ldflags (and therefore the fingerprint and Go's link cache) are reproducible."""


class BuildError(RuntimeError):
    """A component could not be built; the message names the command and its output tail."""


@dataclass
class BuildResult:
    """What `build` did: where the binaries are and how long each component took."""

    bin_dir: Path
    seconds: dict[str, float] = field(default_factory=dict)
    cached: list[str] = field(default_factory=list)

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())


def _stderr(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


NO_INLINE: Final = "-gcflags=all=-l -dwarf=false"
"""The test tools that answer a test's handful of requests (Kueue, Jaeger, Helm, actionlint)
also compile without inlining: less compile work for a program a little slower where nothing
is timed (docs/dev-cluster.md). Not in a fingerprint either."""


def build_flags(ldflags: str, *, inline: bool = True) -> list[str]:
    """The flags of every Go build here: no local paths, no DWARF, the given link flags;
    ``inline=False`` for a test tool (:data:`NO_INLINE`)."""
    return ["-trimpath", NO_DWARF if inline else NO_INLINE, "-ldflags", ldflags]


def kube_ldflags() -> str:
    """The version variables hack/lib/version.sh sets, so `kubectl version` reports the pin."""
    major, minor = v.KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        for key, val in (
            ("gitVersion", v.KUBERNETES_VERSION),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
            ("buildDate", BUILD_DATE),
        ):
            flags.append(f"-X {pkg}.{key}={val}")
    return " ".join(flags)


def etcd_ldflags() -> str:
    return f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA={v.ETCD_VERSION}"


def kwok_ldflags() -> str:
    return f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={v.KWOK_VERSION.lstrip('v')}"


def fingerprint(component: str) -> str:
    """Everything that should trigger a rebuild of `component` when it changes."""
    if component in KUBE_BUILT:
        data = {"k8s": v.KUBERNETES_VERSION, "staging": v.KUBERNETES_STAGING_VERSION}
        data["ldflags"] = kube_ldflags()
    elif component == "etcd":
        data = {"etcd": v.ETCD_VERSION, "ldflags": etcd_ldflags()}
    elif component == "kwok":
        data = {"kwok": v.KWOK_VERSION, "ldflags": kwok_ldflags()}
    elif component == "kueue":
        data = {"kueue": v.KUEUE_VERSION, "ldflags": "-s -w"}
    elif component == "pause":
        data = {"source": PAUSE_MAIN, "ldflags": "-s -w"}
    else:
        raise ValueError(f"unknown component {component!r}")
    data.update(component=component, cgo="0", trimpath="1")
    return json.dumps(data, sort_keys=True)


def _stamp(bin_dir: Path, component: str) -> Path:
    return bin_dir / ".stamps" / component


def is_built(component: str, bin_dir: Path | None = None) -> bool:
    """True when the binary exists and was built from the current pins."""
    bin_dir = bin_dir or v.bin_dir()
    stamp = _stamp(bin_dir, component)
    if not (bin_dir / component).is_file() or not stamp.is_file():
        return False
    try:
        return bool(json.loads(stamp.read_text())["fingerprint"] == fingerprint(component))
    except (ValueError, KeyError):
        return False


def go_binary() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("`go` is not on PATH; Go >= 1.26 is needed to build the dev cluster")
    return go


def go_env(**overrides: str) -> dict[str, str]:
    """The build environment of every Go tool the project builds (control plane, Jaeger,
    Helm): no cgo, no toolchain download, no workspace, modules resolved as needed.
    ``overrides`` replace single variables (Helm's ``go install`` takes no ``-mod``)."""
    env = dict(os.environ)
    env.update(
        GOTOOLCHAIN="local",
        CGO_ENABLED="0",
        GOFLAGS="-mod=mod -buildvcs=false",
        GO111MODULE="on",
        GOWORK="off",
    )
    env.update(overrides)
    return env


def go_version() -> str:
    out = subprocess.run(
        [go_binary(), "env", "GOVERSION"],
        env=go_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def check_go() -> str:
    """Fail early with a clear message rather than deep inside a 20-minute compile."""
    ver = go_version()
    parts = ver.removeprefix("go").split(".")
    want = tuple(int(x) for x in v.GO_MIN_VERSION.split("."))
    try:
        have = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return ver  # a devel toolchain: let the build decide
    if have < want:
        raise BuildError(f"{ver} is too old: Kubernetes {v.KUBERNETES_VERSION} needs go >= 1.26")
    return ver


def go_mod_cache() -> Path:
    """GOMODCACHE without running `go` when the default location is in use."""
    env = os.environ.get("GOMODCACHE")
    if env:
        return Path(env)
    if shutil.which("go"):
        out = subprocess.run(
            ["go", "env", "GOMODCACHE"], env=go_env(), capture_output=True, text=True
        )
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip())
    gopath = os.environ.get("GOPATH") or str(Path.home() / "go")
    return Path(gopath.split(os.pathsep)[0]) / "pkg" / "mod"


def kwok_stage_dir() -> Path:
    """kwok's own stage configs (kustomize/stage), read from the Go module cache at run time."""
    mod = go_mod_cache() / "sigs.k8s.io" / f"kwok@{v.KWOK_VERSION}"
    stage = mod / "kustomize" / "stage"
    if not stage.is_dir():
        subprocess.run(
            [go_binary(), "mod", "download", f"sigs.k8s.io/kwok@{v.KWOK_VERSION}"],
            env=go_env(),
            check=True,
            capture_output=True,
        )
    if not stage.is_dir():
        raise BuildError(f"kwok stage configs not found at {stage}")
    return stage


BUILD_NICE: Final = 10
"""Every Go build runs this many nice steps below its caller (two busy cores)."""


def niced(cmd: Sequence[str]) -> list[str]:
    """``cmd`` under ``nice -n BUILD_NICE`` where ``nice`` exists: every Go build's argv."""
    return ["nice", "-n", str(BUILD_NICE), *cmd] if shutil.which("nice") else list(cmd)


def _run(
    cmd: Sequence[str], *, cwd: Path, log: Log, label: str, env: dict[str, str] | None = None
) -> None:
    """Run a go command, showing progress (packages compiled, elapsed) while it is silent."""
    started = time.monotonic()
    count = 0
    tail: list[str] = []
    done = threading.Event()

    def ticker() -> None:
        while not done.wait(30):
            log(f"  … {label}: {count} packages compiled, {time.monotonic() - started:.0f}s")

    proc = subprocess.Popen(
        niced(cmd),
        cwd=cwd,
        env={**go_env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    thread = threading.Thread(target=ticker, daemon=True)
    thread.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            if not line:
                continue
            if line.startswith("go: downloading"):
                log(f"  {line}")
            else:
                count += 1
            tail = [*tail[-40:], line]
        rc = proc.wait()
    finally:
        done.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if rc != 0:
        output = "\n".join(tail)
        raise BuildError(f"{label} failed (exit {rc}): {' '.join(cmd)}\n  in {cwd}\n{output}")


def write_kube_module(src: Path) -> None:
    """A wrapper module that requires k8s.io/kubernetes with every staging repo published."""
    src.mkdir(parents=True, exist_ok=True)
    replaces = "\n".join(
        f"\tk8s.io/{m} => k8s.io/{m} {v.KUBERNETES_STAGING_VERSION}"
        for m in v.KUBERNETES_STAGING_MODULES
    )
    gomod = (
        f"module {KUBE_MODULE}\n\ngo 1.26.0\n\ngodebug default=go1.26\n\n"
        f"require k8s.io/kubernetes {v.KUBERNETES_VERSION}\n\nreplace (\n{replaces}\n)\n"
    )
    imports = "\n".join(f'\t_ "k8s.io/kubernetes/cmd/{c}"' for c in KUBE_BUILT)
    tools = f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n"
    _write_if_changed(src / "go.mod", gomod, reset=src / "go.sum")
    _write_if_changed(src / "tools.go", tools)


def write_etcd_module(src: Path) -> None:
    """A wrapper main that calls etcdmain.Main, as upstream's go.etcd.io/etcd/v3 main does."""
    (src / "cmd" / "etcd").mkdir(parents=True, exist_ok=True)
    replaces = "\n".join(f"\t{m} => {m} {v.ETCD_VERSION}" for m in v.ETCD_SIBLING_MODULES)
    gomod = (
        f"module {ETCD_MODULE}\n\ngo 1.26.0\n\n"
        f"require go.etcd.io/etcd/server/v3 {v.ETCD_VERSION}\n\nreplace (\n{replaces}\n)\n"
    )
    main = (
        "// Command etcd runs the pinned etcd server.\npackage main\n\nimport (\n"
        '\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\n'
        "func main() {\n\tetcdmain.Main(os.Args)\n}\n"
    )
    _write_if_changed(src / "go.mod", gomod, reset=src / "go.sum")
    _write_if_changed(src / "cmd" / "etcd" / "main.go", main)


def write_kueue_module(src: Path) -> None:
    """A wrapper module requiring the pinned Kueue, its checksums seeded into go.sum.

    Not `go install sigs.k8s.io/kueue/cmd/kueue@<version>`: that also reads the module's
    version list (for deprecation notices), which the module proxy refuses (403) for Kueue."""
    src.mkdir(parents=True, exist_ok=True)
    gomod = f"module {KUEUE_MODULE}\n\ngo 1.26.0\n\nrequire sigs.k8s.io/kueue {v.KUEUE_VERSION}\n"
    tools = '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/kueue/cmd/kueue"\n'
    _write_if_changed(src / "go.mod", gomod, reset=src / "go.sum")
    _write_if_changed(src / "tools.go", tools)
    if not (src / "go.sum").is_file():
        (src / "go.sum").write_text("".join(line + "\n" for line in v.KUEUE_SUMS))


def write_pause_module(src: Path) -> None:
    """The pause process's module: the standard library only, so nothing is downloaded."""
    src.mkdir(parents=True, exist_ok=True)
    _write_if_changed(src / "go.mod", f"module {PAUSE_MODULE}\n\ngo 1.26.0\n")
    _write_if_changed(src / "main.go", PAUSE_MAIN)


def _write_if_changed(path: Path, text: str, reset: Path | None = None) -> None:
    if path.is_file() and path.read_text() == text:
        return
    path.write_text(text)
    if reset is not None:
        reset.unlink(missing_ok=True)


def _build_one(component: str, root: Path, bin_dir: Path, log: Log) -> None:
    go = go_binary()
    out = bin_dir / component
    if component in KUBE_BUILT:
        src = root / "src" / "kubernetes"
        write_kube_module(src)
        if not (src / "go.sum").is_file():
            _run([go, "mod", "tidy"], cwd=src, log=log, label="go mod tidy (kubernetes)")
        pkg = f"k8s.io/kubernetes/cmd/{component}"
        cmd = [go, "build", "-v", *build_flags(kube_ldflags()), "-o", str(out), pkg]
        _run(cmd, cwd=src, log=log, label=component)
    elif component == "etcd":
        src = root / "src" / "etcd"
        write_etcd_module(src)
        if not (src / "go.sum").is_file():
            _run([go, "mod", "tidy"], cwd=src, log=log, label="go mod tidy (etcd)")
        cmd = [go, "build", "-v", *build_flags(etcd_ldflags()), "-o", str(out)]
        _run([*cmd, "./cmd/etcd"], cwd=src, log=log, label=component)
    elif component == "kwok":
        # `go install pkg@version` builds kwok exactly as its own go.mod pins it; GOBIN puts
        # it in the cache. It runs outside any module, so cwd is the (module-free) cache root.
        cmd = [go, "install", "-v", *build_flags(kwok_ldflags())]
        cmd.append(f"sigs.k8s.io/kwok/cmd/kwok@{v.KWOK_VERSION}")
        _run(
            cmd,
            cwd=root,
            log=log,
            label=component,
            env={"GOBIN": str(bin_dir), "GOFLAGS": "-buildvcs=false"},
        )
    elif component == "kueue":
        src = root / "src" / "kueue"
        write_kueue_module(src)
        env = {"GONOSUMDB": "sigs.k8s.io/kueue"}  # verified against the seeded go.sum
        _run([go, "mod", "tidy"], cwd=src, log=log, label="go mod tidy (kueue)", env=env)
        sums = (src / "go.sum").read_text().splitlines()
        if not set(v.KUEUE_SUMS) <= set(sums):
            raise BuildError(f"go.sum of {src} lost the pinned Kueue checksums {v.KUEUE_SUMS}")
        cmd = [go, "build", "-v", *build_flags("-s -w", inline=False), "-o", str(out)]
        _run([*cmd, "sigs.k8s.io/kueue/cmd/kueue"], cwd=src, log=log, label=component, env=env)
    elif component == "pause":
        src = root / "src" / "pause"
        write_pause_module(src)
        cmd = [go, "build", "-v", *build_flags("-s -w"), "-o", str(out), "."]
        _run(cmd, cwd=src, log=log, label=component)
    else:
        raise ValueError(f"unknown component {component!r}")


def lock_name(component: str) -> str:
    """Components built from one wrapper module share its lock (and its go.mod)."""
    return "kubernetes" if component in KUBE_BUILT else component


def build(
    components: Sequence[str] = v.ALL_COMPONENTS,
    *,
    force: bool = False,
    log: Log = _stderr,
) -> BuildResult:
    """Build what is missing or stale; return at once (no `go` call) when all is cached."""
    bin_dir = v.bin_dir()
    result = BuildResult(bin_dir=bin_dir)
    todo = [c for c in components if force or not is_built(c, bin_dir)]
    result.cached = [c for c in components if c not in todo]
    if not todo:
        return result
    root = v.cluster_cache_dir()
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / ".stamps").mkdir(exist_ok=True)
    ver = check_go()
    log(f"building {', '.join(todo)} with {ver} into {bin_dir} (cold builds take a while)")
    for i, component in enumerate(todo, 1):
        with build_lock(lock_name(component), log):
            if not force and is_built(component, bin_dir):  # another process built it meanwhile
                result.cached.append(component)
                continue
            log(f"[{i}/{len(todo)}] {component}")
            started = time.monotonic()
            _stamp(bin_dir, component).unlink(missing_ok=True)
            _build_one(component, root, bin_dir, log)
            took = time.monotonic() - started
            result.seconds[component] = took
            stamp = {"fingerprint": fingerprint(component), "go": ver, "seconds": round(took, 1)}
            _stamp(bin_dir, component).write_text(json.dumps(stamp))
        log(f"[{i}/{len(todo)}] {component} built in {_fmt(took)}")
    log(f"built {len(todo)} component(s) in {_fmt(result.total_seconds)}")
    return result


def ensure_built(log: Log = _stderr) -> Path:
    """The bin dir, building first if anything is missing (what the cluster start calls)."""
    return build(log=log).bin_dir


def _fmt(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m mlmodelscope.devcluster.build [--force] [COMPONENT ...]`: the standard
    library alone, so hack/test.sh can start this before the project's venv exists. No
    component: the control plane (ALL_COMPONENTS); `kueue` builds the optional Kueue, `node`
    the real node's kubelet and pause (one process, so the builds of one module never race)."""
    args = list(sys.argv[1:] if argv is None else argv)
    names = [a for a in args if not a.startswith("--")] or ["control-plane"]
    components = [c for n in names for c in v.GROUPS.get(n, (n,))]
    known = {*v.ALL_COMPONENTS, *v.OPTIONAL_COMPONENTS}
    if unknown := [c for c in components if c not in known]:
        _stderr(
            f"error: unknown component(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
        return 2
    try:
        result = build(components, force="--force" in args)
    except BuildError as exc:
        _stderr(f"error: {exc}")
        return 1
    if result.seconds:
        _stderr(f"cold build took {_fmt(result.total_seconds)}")
    else:
        _stderr(f"cached: {', '.join(result.cached)} in {result.bin_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
