"""The GPU kit (docs/gpu.md): its CPU dry run through the very command the GPU machine runs,
the bundle's contents and size, the unpacking there, the driver's time limits, and the pure
parts of the measurements: the energy window rule, interleaved rounds, the ncu CSV parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from mlmodelscope.devtools.gpukit import bundle, driver, ncu
from mlmodelscope.devtools.gpukit.bare import interleaved_summary, round_order
from mlmodelscope.devtools.gpukit.energy import MIN_WINDOW_S, Reading, combine, window_energy
from mlmodelscope.devtools.gpukit.plans import CPU_PLANS
from mlmodelscope.devtools.gpukit.record import ENVIRONMENT_KEYS, NO_GPU, StepRecord, problems
from mlmodelscope.devtools.gpukit.steps import run_bounded

ROOT = Path(__file__).parents[2]
MAX_FILES = 8
MAX_FILE_BYTES = 16 << 20


@pytest.mark.frameworks
def test_cpu_dry_run_writes_valid_results_with_gpu_steps_skipped(tmp_path: Path) -> None:
    """``run OUT`` as docs/gpu.md gives it, on a machine without a GPU: every GPU step runs
    its tiny CPU variant and is reported skipped, the results validate, the summary exists."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator"), "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, "-m", "mlmodelscope.devtools.gpukit", "run", str(out)]
    proc = subprocess.run(
        [*command, "--work", str(tmp_path / "work")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    document = json.loads((out / "results.json").read_text())
    assert problems(document) == []
    assert document["gpu"] is False
    steps = {s["name"]: s for s in document["steps"]}
    assert list(steps) == [s.name for s in driver.STEPS]
    assert steps["facts"]["status"] == "ok"
    assert steps["facts"]["data"]["cli_imports"] is True
    for name in ("eval-resnet50", "eval-bert_base", "trace"):
        assert (steps[name]["status"], steps[name]["reason"]) == ("skipped", NO_GPU)
        assert set(ENVIRONMENT_KEYS) <= set(steps[name]["environment"])
    for name in ("eval-resnet50", "eval-bert_base"):
        data = steps[name]["data"]
        assert data["frameworks_blocked"] == {"tensorflow": True, "keras": True}
        measured = {(r["scenario"], r["batch_size"]) for r in data["overhead"]}
        assert measured == {("SingleStream", 1), ("SingleStream", 2), ("Offline", 4)}
        assert data["backend"]["framework"] == "pytorch"
        # energy per batch size on both sides; the agent's windows were metered (no counter
        # here, so no joules, but the window's seconds bracket the reported window)
        assert {(r["scenario"], r["batch_size"]) for r in data["energy"]} == measured
        duration = {(r["scenario"], r["batch_size"]): r["duration_s"] for r in data["agent"]}
        for row in data["energy"]:
            agent, bare = row["agent"], row["bare"]
            assert agent["reason"] == bare["reason"] == "no NVML energy counter"
            assert agent["seconds"] >= duration[(row["scenario"], row["batch_size"])]
            assert bare["windows"] == 2 and bare["seconds"] > 0
        rounds = data["interleaved"]
        assert (rounds["scenario"], rounds["batch_size"], rounds["order"]) == (
            "SingleStream", 1, "AB BA AB"
        )  # fmt: skip
        assert rounds["overhead_median_us"] is not None
    models = steps["trace"]["data"]["models"]
    assert set(models) == {"resnet50", "bert_base"}
    assert "framework" in models["resnet50"]["tracing"]["levels"]
    assert models["resnet50"]["top_layers"]
    profiled = steps["ncu-metrics"]
    assert profiled["status"] == "skipped" and profiled["reason"] in ("no ncu", NO_GPU)
    assert profiled["data"]["target"]["returncode"] == 0  # the profiled program ran (CPU)
    assert len(profiled["data"]["kernels"]) == 3  # the sample CSV through the parser
    assert document["not_yet"] == []
    layered = steps["ncu-layers"]
    assert layered["status"] == "skipped" and layered["reason"] in ("no ncu", NO_GPU)
    assert layered["data"]["target"]["returncode"] == 0 and layered["data"]["layers"] == 174
    assert [r["layer"] for r in layered["data"]["by_layer"]] == [0, 1, 2]
    assert all(r["bound"] and r["of_roof_pct"] is not None for r in layered["data"]["by_layer"])
    for name in ("eval-resnet50", "eval-bert_base"):  # the batch-1 suspects, each round's p50
        suspects = steps[name]["data"]["suspects"]
        assert suspects["order"] == "psp spp pps" and suspects["sampler_ran"] is False
        assert all(len(v) == 3 for v in suspects["p50_us"].values())
    benanza = steps["benanza-gpu"]
    assert (benanza["status"], benanza["reason"]) == ("skipped", NO_GPU)
    assert benanza["data"]["errors"] == {}
    for key in ("resnet50-b1", "bert_base-b1"):
        model = benanza["data"]["models"][key]
        assert model["fp16_layers_match"] and model["bound"]["conditions"]["not_timed"] == {}
        labels = {row["label"] for row in model["bound"]["rows"]}
        assert labels == {f"pytorch-cuda ({v})" for v in model["end_to_end"]}
        rows = model["bound"]["rows"]
        assert len(labels) == 6 and all(r["layers_run"] == r["layers_total"] for r in rows)
        kinds = {s["kind"] for s in model["suggestions"]}
        assert kinds >= {"tensor cores", "algorithm search"}
    assert benanza["data"]["models"]["resnet50-b1"]["fused_ms"]  # torch.fx traces ResNet-50
    assert "fused fp32" in benanza["data"]["models"]["bert_base-b1"]["not_run"]  # not BERT
    dlbricks = steps["dlbricks-gpu"]
    assert (dlbricks["status"], dlbricks["data"]["errors"]) == ("skipped", {})
    estimated = {(e["model"], e["batch_size"]) for e in dlbricks["data"]["estimates"]}
    assert estimated == {(m, b) for m in ("resnet50", "bert_base") for b in (1, 2)}
    assert all(e["layers_timed"] == e["layers"] for e in dlbricks["data"]["estimates"])
    summary = (out / "summary.txt").read_text()
    assert "eval-resnet50: skipped (no GPU)" in summary
    assert "interleaved SingleStream batch 1, AB BA AB: overhead median" in summary
    assert "energy SingleStream batch 1: agent none (no NVML energy counter)" in summary
    assert "sample CSV (the parser's dry run; made-up figures): 3 launches of 2 kernels" in summary
    assert "results.json: valid" in summary and "not yet: none" in summary
    assert "resnet50-b1: bound " in summary and "algorithm search: fp32: cuDNN search" in summary
    assert "resnet50 batch 2: 174 layers, 54 bricks, estimate " in summary
    assert "suspects batch 1 (psp spp pps): bare p50 " in summary
    files = list(out.iterdir())
    assert len(files) <= MAX_FILES
    assert all(f.stat().st_size <= MAX_FILE_BYTES for f in files)
    assert {f.name for f in files} == {
        "results.json", "summary.txt", "steps.log", "gpu-resnet50.json", "gpu-resnet50.trace.json"
    }  # fmt: skip
    fixture = json.loads((out / "gpu-resnet50.json").read_text())
    assert fixture["tracing"]["trace_file"] == "gpu-resnet50.trace.json"
    cut = models["resnet50"]["fixture"]
    assert cut["queries_per_pass"] == 2 and cut["spans"] < cut["spans_whole"]


def test_a_step_past_its_limit_is_stopped_and_the_run_goes_on(tmp_path: Path) -> None:
    """A step that overruns is killed and recorded as timeout; a run out of time starts no
    further step and says so."""
    env = driver.step_env(ROOT, None)
    record, _ = driver.run_step(driver.Step("facts", 0.3, "x"), tmp_path, False, 0.3, env)
    assert (record.status, record.reason) == ("timeout", "stopped after 0.3 s")
    out = tmp_path / "out"
    assert driver.run(out, ROOT, tmp_path / "work", total_s=1.0) == 1
    document = json.loads((out / "results.json").read_text())
    assert problems(document) == []
    assert {s["status"] for s in document["steps"]} == {"not_run"}


def test_energy_is_refused_for_a_short_window_and_without_a_counter() -> None:
    """NVML's counter advances in steps: a window under MIN_WINDOW_S gives no figure, only its
    joules, seconds and the reason; a long one gives J per sample and mean power."""
    start = Reading(0, 1000.0)
    long = window_energy(start, Reading(int(2e9), 1600.0), samples=1200)
    assert long["j_per_sample"] == pytest.approx(0.5) and long["mean_power_w"] == 300.0
    assert (long["seconds"], long["reason"]) == (2.0, None)
    short_ns = int((MIN_WINDOW_S - 0.05) * 1e9)
    short = window_energy(start, Reading(short_ns, 1200.0), samples=500)
    assert short["j_per_sample"] is None and short["joules"] == 200.0
    assert "too coarse" in short["reason"] and short["seconds"] == pytest.approx(0.95)
    stuck = window_energy(start, Reading(int(1.5e9), 1000.0), samples=500)
    assert stuck["j_per_sample"] is None and "did not advance" in stuck["reason"]
    none = window_energy(Reading(0, None), Reading(int(2e9), None), samples=10)
    assert (none["j_per_sample"], none["reason"]) == (None, "no NVML energy counter")
    both = combine([long, short, window_energy(start, Reading(int(1e9), 1250.0), 500)])
    assert (both["windows"], both["windows_used"], both["samples"]) == (3, 2, 1700)
    assert both["j_per_sample"] == pytest.approx(850 / 1700)
    assert combine([short, none])["reason"] == short["reason"]


def test_interleaved_rounds_give_the_median_of_per_round_differences() -> None:
    orders = round_order(3)
    assert orders == [("agent", "bare"), ("bare", "agent"), ("agent", "bare")]
    rounds = [
        {"order": list(o), "agent_p50_us": a, "bare_p50_us": b}
        for o, a, b in zip(orders, (1700.0, 1660.0, 2000.0), (1650.0, 1655.0, 1640.0), strict=True)
    ]
    summary = interleaved_summary(rounds)
    assert summary["order"] == "AB BA AB"
    assert summary["overhead_median_us"] == 50.0  # of +50, +5, +360: the drift round is out
    assert (summary["overhead_min_us"], summary["overhead_max_us"]) == (5.0, 360.0)
    assert summary["goal_us"] == pytest.approx(0.02 * 1650.0)
    assert summary["meets_goal"] is False
    assert interleaved_summary([])["meets_goal"] is None


def test_the_ncu_csv_becomes_per_kernel_records() -> None:
    """The raw page (a units row under the header, thousands separators, n/a) and the long
    form give the same launches; FLOPs are 2 FFMA + FADD + FMUL plus the tensor path's."""
    launches = ncu.parse_csv(ncu.SAMPLE_CSV)
    assert [launch["id"] for launch in launches] == [0, 1, 2]
    records = [ncu.kernel_record(launch) for launch in launches]
    gemm = records[1]
    assert gemm["kernel"].startswith("sm80_xmma_fprop_implicit_gemm")
    assert gemm["duration_s"] == pytest.approx(11_296e-9)
    assert gemm["flops_fp32"] == 2 * 25_088 + 12_544
    assert gemm["flops"] == 231_211_008 + 2 * 25_088 + 12_544
    assert gemm["dram_bytes"] == 2_408_448
    assert gemm["arithmetic_intensity_flop_per_byte"] == pytest.approx(gemm["flops"] / 2_408_448)
    assert gemm["flop_per_s"] == pytest.approx(gemm["flops"] / 11_296e-9)
    assert gemm["dram_bytes_per_s"] == pytest.approx(2_408_448 / 11_296e-9)
    assert gemm["achieved_occupancy_pct"] == 20.1
    assert records[2]["achieved_occupancy_pct"] is None  # "n/a"
    top, second = ncu.by_kernel(records)
    assert (top["kernel"], top["launches"]) == (gemm["kernel"], 1)
    assert second["launches"] == 2 and second["duration_s"] == pytest.approx(7_104e-9)
    assert second["dram_bytes"] == 1_204_224 + 602_112
    long = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
        '"Section Name","Metric Name","Metric Unit","Metric Value"\n'
        + "".join(
            f'"0","1","python3","gpu","k","1","7","Command line profiler metrics","{name}",'
            f'"{unit}","{value}"\n'
            for name, unit, value in (
                (ncu.DURATION, "usecond", "2.5"),
                (ncu.DRAM_BYTES, "Kbyte", "1,000"),
                (ncu.FFMA, "inst", "10"),
                (ncu.FADD, "inst", "1"),
                (ncu.FMUL, "inst", "1"),
                (ncu.OCCUPANCY, "%", "50"),
            )
        )
    )
    (only,) = [ncu.kernel_record(launch) for launch in ncu.parse_csv(long)]
    assert only["duration_s"] == pytest.approx(2.5e-6) and only["dram_bytes"] == 1e6
    assert only["flops"] == 22 and only["flops_tensor_tf32"] is None
    assert ncu.parse_csv("==PROF== nothing profiled\n") == []
    header, _, *launch_rows = ncu.SAMPLE_CSV.splitlines()[2:-1]
    no_units = ncu.parse_csv("\n".join([header, *launch_rows]))  # base units assumed
    assert [ncu.kernel_record(x) for x in no_units] == records


def test_ncu_is_told_which_kernels_and_metrics_and_its_errors_are_named(tmp_path: Path) -> None:
    names = [
        "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_execute_kernel__5x_cudnn",
        "void cudnn::engines_precompiled::nchwToNhwcKernel<float, (cudnnKernelDataType_t)2>"
        "(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, float const*, float*)",
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>(Params)",
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(Params)",
        "fused_batch_norm_relu",
    ]
    assert ncu.function_name(names[1]) == "nchwToNhwcKernel"
    assert ncu.kernel_filter(names, 3) == f"{names[0]}|nchwToNhwcKernel|Kernel2"
    assert ncu.kernel_filter([], 3) is None
    listing = "\n".join(f"{n}  Counter  x  desc" for n in [f"m{i}__x" for i in range(20)])
    chosen, left_out = ncu.choose_metrics(listing + "\nsm__ops_path_tensor_src_tf32_dst_fp32 C")
    assert chosen == [*ncu.METRICS, ncu.TENSOR_TF32] and left_out == [ncu.SM_CLOCK]
    assert ncu.choose_metrics(None) == (list(ncu.METRICS), list(ncu.OPTIONAL_METRICS))
    line = ncu.command("ncu", tmp_path / "n.csv", ["a.sum"], 40, "k", ["python3", "t.py"])
    assert line[-2:] == ["python3", "t.py"]
    assert line[line.index("--profile-from-start") :][:2] == ["--profile-from-start", "off"]
    assert "regex:k" in line and "--launch-count" in line
    denied = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access ..."
    assert "ERR_NVGPUCTRPERM" in (ncu.problem(denied) or "")
    assert (
        ncu.problem("==ERROR== Failed to find metric x.sum") == "ncu: Failed to find metric x.sum"
    )
    assert ncu.problem("==PROF== Disconnected") is None


FAKE_NCU = """#!/usr/bin/env python3
import os, sys
from mlmodelscope.devtools.gpukit.ncu import SAMPLE_CSV
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler, fake")
elif args == ["--query-metrics"]:
    print("\\n".join(f"m{i}__x Counter" for i in range(20)))
    print("sm__ops_path_tensor_src_tf32_dst_fp32 Counter tensor")
else:
    log = args[args.index("--log-file") + 1]
    mode = os.environ["FAKE_NCU"]
    with open(os.path.join(os.environ["FAKE_NCU_DIR"], "calls"), "a") as calls:
        calls.write(" ".join(args) + "\\n")
    if mode == "none" and "--kernel-name" in args:  # the filter matches no kernel
        text = "==WARNING== No kernels were profiled.\\n"
    elif mode == "denied":
        text = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\\n"
    else:
        text = SAMPLE_CSV
    open(log, "w").write(text)
    sys.exit(1 if mode == "denied" else 0)
"""


@pytest.fixture(scope="module")
def small_resnet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CPU variant's ResNet-50 TorchScript file, built once for the ncu step's tests."""
    from mlmodelscope.devtools.gpukit import steps

    model, _ = steps.build_torchscript(CPU_PLANS["resnet50"], tmp_path_factory.mktemp("m"))
    return model


@pytest.mark.frameworks
@pytest.mark.parametrize(
    ("mode", "status", "attempts"), [("ok", "ok", 1), ("denied", "skipped", 1), ("none", "ok", 2)]
)
def test_the_ncu_step_on_a_gpu_machine_with_a_stand_in_ncu(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    small_resnet: Path,
    mode: str,
    status: str,
    attempts: int,
) -> None:
    """The GPU branch of ``ncu-metrics`` with a stand-in ``ncu`` on PATH: its CSV becomes the
    records; no permission for the counters is a skip that says so; a kernel filter that
    matched nothing is retried without it."""
    from mlmodelscope.devtools.gpukit import steps

    fake = tmp_path / "bin" / "ncu"
    fake.parent.mkdir()
    fake.write_text(FAKE_NCU)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "operator"))
    monkeypatch.setenv("FAKE_NCU", mode)
    monkeypatch.setenv("FAKE_NCU_DIR", str(tmp_path))
    monkeypatch.setattr(steps, "GPU_PLANS", CPU_PLANS)  # the small model: no GPU here
    (tmp_path / small_resnet.name).hardlink_to(small_resnet)
    trace = {"data": {"models": {"resnet50": {"top_kernels": [{"name": "void k<float>(int)"}]}}}}
    (tmp_path / "trace.json").write_text(json.dumps(trace))
    steps.ncu_metrics(tmp_path, gpu=True)
    record = json.loads((tmp_path / "ncu-metrics.json").read_text())
    assert record["status"] == status
    assert len(record["data"]["attempts"]) == attempts
    assert record["data"]["metrics"] == [*ncu.METRICS, ncu.TENSOR_TF32]
    calls = (tmp_path / "calls").read_text().splitlines()
    assert "--kernel-name-base function --kernel-name regex:k " in calls[0]
    if status == "ok":
        assert len(record["data"]["kernels"]) == 3 and record["data"]["source"] == "ncu"
        assert record["data"]["artifacts"] == ["ncu-resnet50.csv"]
    else:
        assert "ERR_NVGPUCTRPERM" in record["reason"] and record["data"]["kernels"] == []


def test_a_bounded_command_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    """ncu starts the profiled program: past its limit both are killed, not only ncu."""
    code, output, seconds = run_bounded(
        ["sh", "-c", "sleep 30 & echo $!; wait"], tmp_path, timeout_s=1.0
    )
    assert code is None and seconds < 10
    child = Path(f"/proc/{int(output.split()[0])}/stat")
    assert not child.exists() or child.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_problems_name_what_is_wrong() -> None:
    document = {
        "kit": "mlmodelscope-gpukit",
        "format": 1,
        "started_at": "t",
        "gpu": True,
        "install": {},
        "not_yet": [],
        "steps": [
            StepRecord("a", "failed").to_dict(),
            StepRecord("b", "ok", environment={"device": "H100"}).to_dict(),
            {**StepRecord("c", "ok").to_dict(), "status": "done"},
        ],
    }
    found = problems(document)
    assert any("steps[0] (a).reason" in p for p in found)
    assert any("steps[1] (b).environment: missing" in p for p in found)
    assert any("steps[2] (c).status: 'done'" in p for p in found)


def test_the_bundle_covers_what_the_core_needs_beyond_the_gpu_machine() -> None:
    """Every core dependency the GPU machine lacks, and pydantic's own, is in the bundle and
    pinned in constraints.txt: a new core dependency fails here, not on the GPU."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    bundled = {bundle.normalize(p) for p in bundle.PACKAGES}
    has = {bundle.normalize(p) for p in bundle.GPU_MACHINE_HAS}
    for requirement in pyproject["project"]["dependencies"]:
        name = bundle.normalize(requirement.split(">")[0].split("=")[0].split("<")[0].strip())
        assert name in bundled | has, f"{name}: neither bundled nor on the GPU machine"
    for requirement in metadata.requires("pydantic") or []:
        if "extra ==" not in requirement:
            name = bundle.normalize(requirement.split(">")[0].split("=")[0].split("<")[0])
            assert name.strip() in bundled, f"pydantic needs {name}"
    pins = bundle.pins(ROOT / "constraints.txt")
    assert [p.split("==")[0] for p in pins] == list(bundle.PACKAGES)


def _wheel(folder: Path, name: str, version: str) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}/__init__.py", f"VERSION = {version!r}\n")
        archive.writestr(f"{name}-{version}.dist-info/METADATA", f"Name: {name}\n")
    return path


def test_size_check_adds_wheels_and_tree_against_the_budget(tmp_path: Path) -> None:
    _wheel(tmp_path, "small_pkg", "1.0")
    check = bundle.size_check(tmp_path, tree=1000)
    assert check.ok and check.total_bytes == check.wheels_bytes + 1000
    assert not bundle.SizeCheck(1, bundle.BUDGET_BYTES).ok
    assert bundle.BUDGET_BYTES < bundle.TRANSFER_LIMIT_BYTES
    tree = bundle.tree_bytes(ROOT)
    assert 0 < tree < bundle.BUDGET_BYTES // 2, "the working tree alone nears the budget"
    prepared = ROOT / bundle.WHEELS
    if any(prepared.glob("*.whl")):  # after `gpukit prepare`: the real bundle
        assert bundle.size_check(prepared, tree).ok


def test_install_unpacks_what_is_missing_and_keeps_what_is_newer(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "gpukit_probe", "1.0")
    _wheel(wheels, "pydantic", "0.1")  # older than the one installed here
    site = tmp_path / "site"
    (site / "stale").mkdir(parents=True)
    report = bundle.install(wheels, site)
    assert report["unpacked"] == ["gpukit-probe 1.0"]
    assert report["kept"][0].startswith("pydantic ")
    assert not (site / "stale").exists() and not (site / "pydantic").exists()
    probe = subprocess.run(
        [sys.executable, "-c", "import gpukit_probe; print(gpukit_probe.VERSION)"],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "1.0"


def test_a_wheel_for_another_python_is_never_unpacked(tmp_path: Path) -> None:
    """The bundle is for 3.12; a dry run on another Python leaves its cpXY wheels alone."""
    other = "cp39"
    wheel = tmp_path / f"pydantic_core-9.0-{other}-{other}-manylinux2014_x86_64.whl"
    _wheel(tmp_path, "gpukit_probe", "1.0").rename(wheel)
    assert not bundle.fits_this_python(wheel)
    assert bundle.fits_this_python(tmp_path / "x-1.0-py3-none-any.whl")
    ours = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert bundle.fits_this_python(tmp_path / f"x-1.0-{ours}-{ours}-manylinux_2_17_x86_64.whl")
    report = bundle.install(tmp_path, tmp_path / "site")
    assert report["unfit"] == [wheel.name] and report["unpacked"] == []


def test_the_remote_call_carries_the_wheels_and_fits_the_limits() -> None:
    call = bundle.run_call()
    assert call["carry"] == [".gpukit/wheels"]
    assert driver.TOTAL_S + 30 <= call["timeout_s"] <= 600
    assert sum(s.timeout_s for s in driver.STEPS) <= driver.TOTAL_S
    assert "$OUT" in call["command"]
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", ".gpukit/wheels/x.whl"], cwd=ROOT, check=False
    )
    assert ignored.returncode == 0, ".gpukit/ must be git-ignored (it travels by carry)"


def test_the_committed_gpu_run_is_valid_and_quoted_as_measured() -> None:
    """benchmarks/gpu/ holds what a GPU run measured; docs/gpu.md quotes its summary as is."""
    runs = sorted((ROOT / "benchmarks" / "gpu").glob("*/results.json"))
    assert runs, "no GPU run committed under benchmarks/gpu/"
    for results in runs:
        document = json.loads(results.read_text())
        assert problems(document) == [], results
        assert document["environment"]["cuda_available"] is True, results
        statuses = {s["name"]: s["status"] for s in document["steps"]}
        assert "facts" in statuses and len(statuses) > 1, results  # --only runs some
        assert set(statuses.values()) == {"ok"}, (results, statuses)
        assert document["gpu"], results
        docs = (ROOT / "docs" / "gpu.md").read_text()
        marker = f"<!-- benchmarks/gpu/{results.parent.name}/summary.txt -->\n```text\n"
        assert marker in docs, f"docs/gpu.md does not quote {results.parent.name}"
        quoted = docs.split(marker, 1)[1].split("\n```", 1)[0]
        assert quoted == (results.parent / "summary.txt").read_text().rstrip("\n")
