"""A dry run of a GitHub Actions workflow's ``run:`` steps on this machine.

`DryRun.run_job` runs the named ``run:`` steps of one job in order, as the runner would: with
``bash --noprofile --norc -eo pipefail`` (the workflow's ``defaults.run.shell: bash``), the job's
and the step's ``env`` (each ``${{ expression }}`` looked up in a table the test gives), and the
``GITHUB_OUTPUT``, ``GITHUB_STEP_SUMMARY`` and ``RUNNER_TEMP`` files; ``steps.<id>.outputs`` and
the job's ``outputs`` are read back. ``uses:`` steps are not run: the test does what they do
(an artifact download is a copy). A ``run:`` script may not hold ``${{ }}`` itself (everything
comes through ``env``, the hardening against script injection), and every ``run:`` step of the
job is either run or named in ``not_run`` with the reason.

`write_stubs` puts stand-ins for ``docker``, ``cosign``, ``helm`` and ``gh`` first on PATH: each
appends its argv (and what it read on stdin) to a JSON-lines log; ``docker buildx bake`` writes
the ``--metadata-file`` a real push would (`bake_metadata`); ``helm push`` prints what Helm
prints; every other ``helm`` command runs the real, pinned Helm.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


class StepError(AssertionError):
    """A step exited non-zero; the message holds its name, exit code and output."""


def fake_digest(*parts: str) -> str:
    return "sha256:" + hashlib.sha256("\0".join(parts).encode()).hexdigest()


def resolve_tags(bake: Mapping[str, Any], target: str, env: Mapping[str, str]) -> list[str]:
    """The target's tags with the bake variables filled in (the environment overrides a
    variable's default, as in bake)."""
    values = {
        name: env.get(name, str(v.get("default", ""))) for name, v in bake["variable"].items()
    }
    tags = bake["target"][target]["tags"]
    return [re.sub(r"\$\{(\w+)\}", lambda m: values[m[1]], tag) for tag in tags]


def bake_metadata(
    bake: Mapping[str, Any], targets: Sequence[str], env: Mapping[str, str]
) -> dict[str, Any]:
    """What ``docker buildx bake --push --metadata-file`` writes for ``targets``: per target the
    builder's ref, the pushed image index (attestations make every image an index) and the
    image's name, plus the build's warnings."""
    doc: dict[str, Any] = {"buildx.build.warnings": []}
    for target in targets:
        name = ",".join(resolve_tags(bake, target, env))
        digest = fake_digest(target, name)
        doc[target] = {
            "buildx.build.ref": f"builder-release/builder-release0/{digest[7:32]}",
            "containerimage.descriptor": {
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "digest": digest,
                "size": 1609,
            },
            "containerimage.digest": digest,
            "image.name": name,
        }
    return doc


_STUB_HEAD = f"#!{sys.executable}\n" + (
    "import hashlib, json, os, re, sys\n"
    "from pathlib import Path\n"
    "args = sys.argv[1:]\n"
    "entry = {'tool': Path(sys.argv[0]).name, 'argv': args}\n"
    "def log():\n"
    "    with open(os.environ['STUB_LOG'], 'a') as f:\n"
    "        f.write(json.dumps(entry) + '\\n')\n"
)

_STUBS = {
    "docker": (
        "if args[:1] == ['login']:\n"
        "    entry['stdin'] = sys.stdin.read()\n"
        "elif args[:2] == ['buildx', 'bake']:\n"
        "    sys.path.insert(0, os.environ['STUB_HELPERS'])\n"
        "    from workflow_runner import bake_metadata\n"
        "    opts, targets, rest = {}, [], iter(args[2:])\n"
        "    for arg in rest:\n"
        "        if arg in ('--file', '--set', '--metadata-file'):\n"
        "            opts.setdefault(arg, []).append(next(rest))\n"
        "        elif not arg.startswith('-'):\n"
        "            targets.append(arg)\n"
        "    bake = json.loads(Path(opts['--file'][0]).read_text())\n"
        "    doc = bake_metadata(bake, targets, os.environ)\n"
        "    Path(opts['--metadata-file'][0]).write_text(json.dumps(doc, indent=2))\n"
        "    entry['env'] = {k: os.environ.get(k) for k in bake['variable']}\n"
        "log()\n"
    ),
    "cosign": "log()\n",
    "gh": "log()\n",
    "helm": (
        "if args[:1] == ['push']:\n"
        "    chart, url = Path(args[1]), args[2]\n"
        "    name, _, version = chart.name.removesuffix('.tgz').rpartition('-')\n"
        "    digest = hashlib.sha256(chart.read_bytes()).hexdigest()\n"
        "    ref = url.removeprefix('oci://') + '/' + name + ':' + version\n"
        "    sys.stderr.write(f'Pushed: {ref}\\nDigest: sha256:{digest}\\n')\n"
        "elif args[:2] == ['registry', 'login']:\n"
        "    entry['stdin'] = sys.stdin.read()\n"
        "else:\n"
        "    os.execv(os.environ['REAL_HELM'], ['helm', *args])\n"
        "log()\n"
    ),
}


def write_stubs(directory: Path) -> Path:
    """The stand-ins, executable, in ``directory``; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, body in _STUBS.items():
        path = directory / name
        path.write_text(_STUB_HEAD + body)
        path.chmod(0o755)
    return directory


def stub_calls(log: Path, tool: str | None = None) -> list[dict[str, Any]]:
    """What the stand-ins were called with, in order (only ``tool``'s when given)."""
    if not log.is_file():
        return []
    calls = [json.loads(line) for line in log.read_text().splitlines() if line]
    return [c for c in calls if tool is None or c["tool"] == tool]


def substitute(text: str, context: Mapping[str, str], where: str) -> str:
    def lookup(match: re.Match[str]) -> str:
        if match[1] not in context:
            raise AssertionError(f"{where}: the dry run has no value for ${{{{ {match[1]} }}}}")
        return context[match[1]]

    return EXPRESSION.sub(lookup, text)


@dataclass(frozen=True)
class JobRun:
    """What a job left: its outputs and the Markdown its steps appended to the summary."""

    outputs: dict[str, str]
    summary: str


@dataclass
class DryRun:
    """Runs jobs of one workflow in ``workspace`` with ``path`` first on PATH."""

    workflow: Mapping[str, Any]
    workspace: Path
    scratch: Path
    """Where each job's runner files go (RUNNER_TEMP, GITHUB_OUTPUT, the scripts)."""
    path: Sequence[Path]
    context: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    """Variables every step sees (the stand-ins' STUB_LOG, REAL_HELM, ...)."""
    runs: int = 0

    def _base_env(self, runner: Path) -> dict[str, str]:
        home = runner / "home"
        home.mkdir(parents=True, exist_ok=True)
        search = [str(p) for p in self.path] + [os.environ.get("PATH", "/usr/bin:/bin")]
        return {
            "PATH": os.pathsep.join(search),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "RUNNER_TEMP": str(runner),
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            **self.env,
        }

    def run_job(
        self,
        job: str,
        *,
        run: Sequence[str],
        not_run: Mapping[str, str],
        context: Mapping[str, str] | None = None,
    ) -> JobRun:
        """Run the ``run:`` steps named in ``run`` (in the workflow's order); return the job's
        outputs and summary. Raises `StepError` for a step that exits non-zero."""
        spec = self.workflow["jobs"][job]
        steps = spec["steps"]
        names = [s.get("name") for s in steps if "run" in s]
        unknown = sorted((set(run) | set(not_run)) - set(names))
        assert not unknown, f"{job}: no run step named {unknown}"
        untold = [n for n in names if n not in run and n not in not_run]
        assert not untold, f"{job}: say whether the dry run runs {untold}"
        ctx = {**self.context, **(context or {})}
        self.runs += 1
        runner = self.scratch / f"{self.runs}-{job}"
        runner.mkdir(parents=True)
        summary = runner / "step-summary.md"
        summary.touch()
        job_env = {k: substitute(str(v), ctx, job) for k, v in (spec.get("env") or {}).items()}
        for index, step in enumerate(steps):
            if "run" not in step or step["name"] not in run:
                continue
            where = f"{job}: {step['name']}"
            assert "${{" not in step["run"], f"{where}: pass expressions through env, not run"
            outputs = runner / f"output-{index}"
            outputs.touch()
            step_env = {
                k: substitute(str(v), ctx, where) for k, v in (step.get("env") or {}).items()
            }
            env = {
                **self._base_env(runner),
                **job_env,
                **step_env,
                "GITHUB_OUTPUT": str(outputs),
                "GITHUB_STEP_SUMMARY": str(summary),
            }
            script = runner / f"step-{index}.sh"
            script.write_text(step["run"])
            proc = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                cwd=self.workspace,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            if proc.returncode != 0:
                raise StepError(
                    f"{where} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}".rstrip()
                )
            for line in outputs.read_text().splitlines():
                key, _, value = line.partition("=")
                if "id" in step:
                    ctx[f"steps.{step['id']}.outputs.{key}"] = value
        outputs_spec = spec.get("outputs") or {}
        return JobRun(
            {k: substitute(str(v), ctx, f"{job} outputs") for k, v in outputs_spec.items()},
            summary.read_text(),
        )
