"""The dashboard's Launch pages as HTML strings, and the one script they load.

- the Launch form (``/launch``): evaluations or one sweep, a catalog Model (a sweep: more
  Models, devices), frameworks, the device (evaluations: cpu, or gpu and how many;
  :func:`device_fieldset`), scenario, batch sizes, dataset (masks, targets, COCO annotations
  and a text tokenizer too), task (a detector's box format, threshold and NMS too),
  where in the cluster it runs (a node pool, or a node selector and tolerations;
  :func:`hardware_fieldset`), and the write token; Preview shows the ModelEvaluation (or
  EvaluationSweep) YAML, Launch queues it;
- the launches (``/launches``) and one launch (``/launches/{id}``): their state, kept current
  by polling ``GET /api/v1/launches/{id}`` without reloading, the run once recorded and a link
  to its trace; a launch in the cluster also shows its Kubernetes Events and the tail of its
  agent's log, refreshed from ``/events`` and ``/log`` of that launch while it polls;
- one sweep launch (``/sweep-launches/{id}``): the sweep's state, its children's, and their
  runs, kept current by polling ``GET /api/v1/sweep-launches/{id}``; Cancel cancels them all.

The script is served from this app (``/static/launch.js``), never inline, so the pages' CSP
allows scripts from ``'self'`` only. It sends the write token the user types in an
``Authorization`` header (never a cookie: the dashboard's cookie only reads), and it writes
every value from the server with ``textContent``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Final, get_args
from urllib.parse import quote

from mlmodelscope.server.launch_queue import FINAL, LaunchRow
from mlmodelscope.server.launch_watch import LaunchEvents, LogTail
from mlmodelscope.server.launches import DEVICES, FRAMEWORKS, SCENARIOS
from mlmodelscope.server.node_pools import POOL_LABELS, NodePool, PoolListing
from mlmodelscope.server.pages.render import esc, page, run_url, trace_link
from mlmodelscope.server.sweep_launches import SweepRow
from mlmodelscope.spec.evaluation import DatasetType, Detection, TaskType
from mlmodelscope.spec.manifest import ModelManifest

SCRIPT_PATH: Final = "/static/launch.js"
PAGE_TAIL: Final = 200
"""Log lines a launch's page shows."""
DATASET_TYPES: Final = tuple(t.value for t in DatasetType)
TASK_TYPES: Final = tuple(t.value for t in TaskType if t is not TaskType.CLASSIFICATION)
"""The task choices besides the default, classification (no ``spec.task``)."""
BOX_FORMATS: Final[tuple[str, ...]] = get_args(Detection.model_fields["box_format"].annotation)
"""``spec.task.detection.boxFormat``'s choices."""


def launch_url(launch_id: str) -> str:
    return f"/launches/{quote(launch_id, safe='')}"


def sweep_url(sweep_id: str) -> str:
    return f"/sweep-launches/{quote(sweep_id, safe='')}"


def _when(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def _errors_for(field: str) -> str:
    return f'<span class="field-errors error-text" data-errors-for="{esc(field)}"></span>'


def _script() -> str:
    return f'<script src="{SCRIPT_PATH}" defer></script>'


NOSCRIPT: Final = (
    '<noscript><p class="error">This page needs JavaScript: it sends the write token in an '
    "Authorization header, which a plain form cannot. The API does the same: "
    "POST /api/v1/launches.</p></noscript>"
)


def selector_text(pool: NodePool) -> str:
    """A pool's node selector as the form's field takes it: ``key=value``."""
    return ", ".join(f"{key}={value}" for key, value in pool.node_selector.items())


def tolerations_text(pool: NodePool) -> str:
    """A pool's tolerations as the form's field takes them: one taint a line, as `kubectl
    taint` writes it (``key=value:Effect``; ``key:Effect`` tolerates any value)."""
    return "\n".join(taint.text() for taint in pool.taints)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _pool_summary(pool: NodePool) -> str:
    gpus = f", {_count(pool.gpus, 'GPU')}" if pool.gpus else ""
    products = f" ({', '.join(pool.gpu_products)})" if pool.gpu_products else ""
    return f"{pool.name}: {_count(pool.nodes, 'node')}{gpus}{products}"


def _pools_table(pools: Sequence[NodePool]) -> str:
    head = "".join(f"<th>{c}</th>" for c in ("pool", "label", "nodes", "GPUs", "taints"))
    rows = "".join(
        f"<tr><td>{esc(p.name)}</td><td><code>{esc(p.label)}</code></td><td>{p.nodes}</td>"
        f"<td>{p.gpus or ''}{esc(' ' + ', '.join(p.gpu_products) if p.gpu_products else '')}"
        f'</td><td class="wrap">'
        + ", ".join(f"<code>{esc(t.text())}</code>" for t in p.taints)
        + "</td></tr>"
        for p in pools
    )
    return (
        f'<div class="scroll whole"><table class="listing" id="node-pools"><thead><tr>{head}'
        f"</tr></thead><tbody>{rows}</tbody></table></div>"
    )


LOCAL_HARDWARE: Final = (
    "This server runs each launch itself (`mlms run`, no --launch-namespace): node pools, "
    "node selectors and tolerations choose Kubernetes nodes and do not apply here."
)


POOL_CPUS: Final = (
    "This pool has GPUs and the device is cpu: the evaluation runs on the pool's CPUs "
    "(choose device gpu to use its GPUs)."
)
"""The note under a chosen pool with GPU capacity while no gpu device is chosen."""


def device_fieldset(local: bool) -> str:
    """The device of evaluations (a sweep's are its devices axis): cpu, or gpu and how many
    GPUs, sent as ``hardware.device`` and ``hardware.gpus``; ``local``: this server runs them
    (`mlms run` on its own machine), else the operator does in the cluster."""
    where = (
        "this server runs it with `mlms run`, which fails, saying so, when the framework "
        "sees no GPU on this machine"
        if local
        else "the operator asks for that many nvidia.com/gpu and tolerates the nvidia.com/gpu taint"
    )
    options = "".join(f'<option value="{d}">{d}</option>' for d in DEVICES)
    return f"""<fieldset class="evaluation-only" id="evaluation-device"><legend>Device</legend>
<label>device<select name="device">{options}</select></label>{_errors_for("hardware.device")}
<label id="gpu-count" hidden>GPUs<input name="gpus" inputmode="numeric" placeholder="1">
</label>{_errors_for("hardware.gpus")}
<span class="hint whole">spec.hardware.device and, for gpu, spec.hardware.gpus (empty: 1);
cpu is the spec's default and is not written. For gpu, {esc(where)}.</span>
</fieldset>"""


def hardware_fieldset(listing: PoolListing | None) -> str:
    """Where a launch runs in the cluster: a node pool (``listing``'s; choosing one fills
    the node selector and tolerations the form sends as ``hardware``), or those two fields
    alone when the Nodes could not be read; ``None`` (launches run on this server): a note."""
    if listing is None:
        return (
            '<fieldset id="hardware"><legend>Hardware</legend>'
            f'<p class="note whole">{esc(LOCAL_HARDWARE)}</p></fieldset>'
        )
    labels = ", ".join(POOL_LABELS)
    if listing.problem is not None:
        who = (
            "This server's identity may not list the cluster's Nodes"
            if listing.status == 403
            else "The cluster's Nodes could not be read"
        )
        status = f"HTTP {listing.status}: " if listing.status else ""
        note = (
            f"{who} ({status}{listing.problem}), so no node pools are offered: give the node "
            "selector and tolerations yourself. The chart grants the server's ServiceAccount "
            "nodes list (ClusterRole <release>-mlmodelscope-server-nodes) unless "
            "server.launch.nodePools is false."
        )
        choice = ""
    elif not listing.pools:
        note = (
            f"No node carries a pool label ({labels}; {_count(listing.unpooled, 'node')} "
            "without one): give the node selector and tolerations yourself."
        )
        choice = ""
    else:
        unpooled = (
            f" {_count(listing.unpooled, 'node')} without a pool label cannot be chosen here."
            if listing.unpooled
            else ""
        )
        note = (
            f"Node pools by node label ({labels}). Choosing one fills the node selector with "
            "its label and the tolerations with its nodes' taints; edit them as you like."
            + unpooled
        )
        options = "".join(
            f'<option value="{esc(p.label)}={esc(p.name)}" data-gpus="{p.gpus}" '
            f'data-node-selector="{esc(selector_text(p))}" '
            f'data-tolerations="{esc(tolerations_text(p))}">{esc(_pool_summary(p))}</option>'
            for p in listing.pools
        )
        choice = (
            '<label>node pool<select name="pool"><option value="">any node (no selector)'
            f"</option>{options}</select></label>"
            f'<span class="hint whole" id="pool-cpus" hidden>{esc(POOL_CPUS)}</span>'
            + _pools_table(listing.pools)
        )
    return f"""<fieldset id="hardware"><legend>Hardware (node pool)</legend>
<p class="note whole" id="hardware-note">{esc(note)}</p>{choice}
<label>node selector<input name="node_selector" placeholder="mlmodelscope.io/pool=gpu-a100">
</label>{_errors_for("hardware.nodeSelector")}
<label>tolerations (one a line)<textarea name="tolerations" rows="3"
placeholder="nvidia.com/gpu=present:NoSchedule"></textarea></label>
{_errors_for("hardware.tolerations")}
<span class="hint whole">spec.hardware.nodeSelector (key=value, comma separated) and
spec.hardware.tolerations (key=value:Effect, key:Effect for any value), checked as
`mlms validate` checks them; the operator's policy on tolerations applies</span>
{_errors_for("hardware")}
</fieldset>"""


def launch_form_page(
    models: Sequence[ModelManifest],
    catalog_problems: Sequence[str],
    hardware: PoolListing | None = None,
) -> str:
    """The Launch form over the catalog's Models; ``hardware``: the cluster's node pools
    (None: launches run on this server, where they do not apply)."""
    if not models:
        note = (
            "No Models to launch: start mlms serve with --catalog FILE_OR_FOLDER "
            "(e.g. --catalog examples/catalog/)."
        )
        return page("Launch", f'<p class="note">{esc(note)}</p>')
    options = "".join(
        f'<option value="{esc(m.metadata.name)}" data-dataset="{esc(m.spec.dataset or "")}">'
        f"{esc(m.metadata.name)}"
        + (f" ({esc(m.spec.task)}, {esc(m.spec.dataset)})" if m.spec.task else "")
        + "</option>"
        for m in models
    )
    frameworks = "".join(
        f'<label class="check"><input type="checkbox" name="frameworks" value="{f}"'
        f"{' checked' if f == 'onnxruntime' else ''}>{f}</label>"
        for f in FRAMEWORKS
    )
    scenarios = "".join(f'<option value="{s}">{s}</option>' for s in SCENARIOS)
    datasets = '<option value="">the Model\'s (digits only)</option>' + "".join(
        f'<option value="{d}">{d}</option>' for d in DATASET_TYPES
    )
    tasks = '<option value="">classification (no spec.task)</option>' + "".join(
        f'<option value="{t}">{t}</option>' for t in TASK_TYPES
    )
    splits = "".join(f'<option value="{s}">{s}</option>' for s in ("test", "train", "all"))
    box_formats = '<option value="">xyxy (the default)</option>' + "".join(
        f'<option value="{b}">{b}</option>' for b in BOX_FORMATS if b != "xyxy"
    )
    kinds = "".join(
        f'<label class="check"><input type="radio" name="kind" value="{k}"'
        f"{' checked' if k == 'evaluation' else ''}>{label}</label>"
        for k, label in (
            ("evaluation", "evaluations: one ModelEvaluation per framework"),
            ("sweep", "a sweep: one EvaluationSweep, a child per combination"),
        )
    )
    more = "".join(
        f'<label class="check"><input type="checkbox" name="models" '
        f'value="{esc(m.metadata.name)}">{esc(m.metadata.name)}</label>'
        for m in models
    )
    devices = "".join(
        f'<label class="check"><input type="checkbox" name="devices" value="{d}">{d}</label>'
        for d in DEVICES
    )
    problems = "".join(
        f'<p class="note">Not in the catalog: {esc(problem)}</p>' for problem in catalog_problems
    )
    form = f"""
<form id="launch-form" class="launch" autocomplete="off">
<fieldset><legend>Launch</legend>{kinds}{_errors_for("kind")}</fieldset>
<fieldset><legend>Model</legend>
<label>model<select name="model">{options}</select></label>{_errors_for("model")}
<label>name prefix<input name="name" placeholder="the model's name"></label>{_errors_for("name")}
</fieldset>
<fieldset class="sweep-only" id="sweep-models" hidden><legend>More models (sweep)</legend>{more}
{_errors_for("models")}</fieldset>
<fieldset><legend>Frameworks</legend>{frameworks}{_errors_for("frameworks")}</fieldset>
<fieldset class="sweep-only" id="sweep-devices" hidden><legend>Devices (sweep; none: cpu)</legend>
{devices}{_errors_for("devices")}</fieldset>
{device_fieldset(hardware is None)}
<fieldset><legend>Scenario</legend>
<label>scenario<select name="scenario">{scenarios}</select></label>{_errors_for("scenario")}
<label>batch sizes<input name="batch_sizes" value="1" placeholder="1, 8, 32"></label>
{_errors_for("batch_sizes")}
<label>min queries<input name="minQueryCount" inputmode="numeric" placeholder="100"></label>
<label>min duration<input name="minDuration" placeholder="1s"></label>
<label>warm-up<input name="warmup" inputmode="numeric" placeholder="10"></label>
{_errors_for("scenario_settings")}
</fieldset>
<fieldset><legend>Dataset</legend>
<label>type<select name="dataset_type">{datasets}</select></label>
<label>split<select name="dataset_split">{splits}</select></label>
<label>path<input name="dataset_path" placeholder="imagefolder, masks, pairs, text, coco">
</label>{_errors_for("dataset.path")}
<label>masks<input name="dataset_masks" placeholder="masks: the folder of PNG masks"></label>
{_errors_for("dataset.masks")}
<label>targets<input name="dataset_targets" placeholder="pairs: the folder of targets"></label>
{_errors_for("dataset.targets")}
<label>annotations<input name="dataset_annotations" placeholder="coco: the instances JSON">
</label>{_errors_for("dataset.annotations")}
<label>tokenizer<input name="dataset_tokenizer" placeholder="text: the tokenizer.json"></label>
{_errors_for("dataset.tokenizer")}
<label>max length<input name="dataset_max_length" inputmode="numeric" placeholder="text: 128">
</label>{_errors_for("dataset.maxLength")}
<label>limit<input name="dataset_limit" inputmode="numeric" placeholder="all"></label>
{_errors_for("dataset")}
</fieldset>
<fieldset><legend>Task</legend>
<label>task<select name="task_type">{tasks}</select></label>
<label>output<input name="task_output" placeholder="the first output"></label>
<label>classes<input name="task_classes" inputmode="numeric" placeholder="segmentation">
</label>
<label>data range<input name="task_range" inputmode="decimal" placeholder="1.0"></label>
<label>box format<select name="task_box_format">{box_formats}</select></label>
<label class="check"><input type="checkbox" name="task_normalized" value="true">boxes
normalized (fractions of the input)</label>
<label>score threshold<input name="task_score_threshold" inputmode="decimal"
placeholder="0.05"></label>
<label>NMS IoU<input name="task_nms_iou" inputmode="decimal" placeholder="none"></label>
{_errors_for("task.detection")}
{_errors_for("task")}
<span class="hint whole">spec.task: segmentation (mIoU; numClasses required) goes with a masks
dataset, image-to-image (PSNR, SSIM; data range of the outputs) with a pairs dataset,
detection (COCO mAP; box format, normalized, score threshold and NMS IoU are
spec.task.detection's) and text-detection with a coco dataset (annotations), and
text-classification (accuracy, macro-F1) with a text dataset (tokenizer)</span>
</fieldset>
{hardware_fieldset(hardware)}
<fieldset><legend>Write token</legend>
<label>token<input type="password" name="token" autocomplete="off" required></label>
<span class="hint">the server's write token, sent in the Authorization header only</span>
</fieldset>
<div class="actions"><button type="button" id="preview">Preview</button>
<button type="submit" id="launch">Launch</button></div>
<p id="launch-error" class="error" hidden></p>
</form>
<h2>Preview</h2><pre class="spec" id="preview-yaml">(Preview shows the documents here.)</pre>
"""
    intro = (
        "<p>Runs the Model in each framework ticked, one ModelEvaluation each, on this server "
        "(one `mlms run` process per evaluation); or, as a sweep, one EvaluationSweep over "
        "models x frameworks x devices x batch sizes (the document you would commit), whose "
        "children this server runs the same way. Every field is checked as `mlms validate` "
        'checks it. <a href="/launches">All launches</a></p>'
    )
    return page("Launch", intro + problems + NOSCRIPT + form + _script())


def _launch_row(row: LaunchRow, sweeps: Mapping[str, str], watched: str = "launch") -> str:
    """One launch as a table row; ``watched`` names its data attribute: ``launch`` (the
    script polls it) or ``child`` (a sweep's, updated from the sweep's one poll)."""
    run = (
        f'<a href="{esc(run_url(row.run_id))}"><code>{esc(row.run_id[:8])}</code></a>'
        if row.run_id
        else ""
    )
    final = "true" if row.state in FINAL else "false"
    sweep = (
        f'<a href="{esc(sweep_url(row.sweep_id))}">{esc(sweeps.get(row.sweep_id, "sweep"))}</a>'
        if row.sweep_id and watched == "launch"
        else ""
    )
    return (
        f'<tr data-{watched}-id="{esc(row.launch_id)}" data-final="{final}">'
        f'<td><a href="{esc(launch_url(row.launch_id))}"><code>{esc(row.launch_id[:8])}</code>'
        f'</a></td><td class="wrap">{esc(row.evaluation)}</td><td>{esc(row.model_name or "")}'
        f"</td><td>{esc(row.framework or '')}</td>"
        f'<td class="state state-{esc(row.state)}">{esc(row.state)}</td>'
        f'<td class="run">{run}</td>'
        + (f"<td>{sweep}</td>" if watched == "launch" else "")
        + f"<td>{esc(_when(row.created_at))}</td></tr>"
    )


def launches_page(rows: Sequence[LaunchRow], sweeps: Mapping[str, str] | None = None) -> str:
    """Launches newest first, each sweep child linking to its sweep (``sweeps``: id -> name);
    their states update while the page is open."""
    link = '<p><a href="/launch">Launch an evaluation or a sweep</a></p>'
    if not rows:
        return page("Launches", link + '<p class="note">No launches yet.</p>')
    columns = ("launch", "evaluation", "model", "framework", "state", "run", "sweep")
    head = "".join(f"<th>{esc(c)}</th>" for c in (*columns, "created (UTC)"))
    body = "".join(_launch_row(r, sweeps or {}) for r in rows)
    table = (
        f'<div class="scroll"><table class="listing" id="launches"><thead><tr>{head}</tr>'
        f"</thead><tbody>{body}</tbody></table></div>"
    )
    return page("Launches", link + table + _script())


def _counts(row: SweepRow) -> str:
    return ", ".join(f"{count} {state}" for state, count in sorted(row.counts.items()))


def sweep_page(row: SweepRow) -> str:
    """One launched sweep: its state and its children's (updated without reloading), their
    runs once recorded, its YAML, and a Cancel form (every child) while it has not ended."""
    state = row.state
    final = "true" if state in FINAL else "false"
    facts = (
        f'<table class="facts sweep" data-sweep-id="{esc(row.sweep_id)}" data-final="{final}">'
        f'<tr><th>state</th><td class="state state-{esc(state)}">{esc(state)}</td></tr>'
        f'<tr><th>children</th><td class="counts">{esc(_counts(row))}</td></tr>'
        f"<tr><th>sweep</th><td>{esc(row.name)}</td></tr>"
        + (f"<tr><th>namespace</th><td>{esc(row.namespace)}</td></tr>" if row.namespace else "")
        + f"<tr><th>created</th><td>{esc(_when(row.created_at))}</td></tr>"
        "</table>"
    )
    cancel = (
        ""
        if state in FINAL
        else (
            f'<form id="cancel-form" class="filters" data-sweep-id="{esc(row.sweep_id)}">'
            '<label>write token<input type="password" name="token" autocomplete="off" '
            'required></label><button type="submit">Cancel sweep</button>'
            '<span id="cancel-error" class="error-text"></span></form>'
        )
    )
    head = "".join(
        f"<th>{esc(c)}</th>"
        for c in ("launch", "evaluation", "model", "framework", "state", "run", "created (UTC)")
    )
    children = "".join(_launch_row(child, {}, watched="child") for child in row.children)
    table = (
        f'<h2>Children</h2><div class="scroll"><table class="listing" id="sweep-children">'
        f"<thead><tr>{head}</tr></thead><tbody>{children}</tbody></table></div>"
    )
    body = (
        '<p><a href="/launches">All launches</a> · <a href="/launch">Launch another</a></p>'
        + facts
        + cancel
        + table
        + f'<h2>Spec</h2><pre class="spec">{esc(row.spec)}</pre>'
    )
    return page(f"Sweep {row.name}", body + _script())


def _trace_cell(trace_id: str | None, jaeger_url: str | None) -> str:
    """The trace row's cell: a link into Jaeger, the bare id without a Jaeger URL, or a note;
    ``data-jaeger-url`` lets the script link a trace id it learns later."""
    url = trace_link(jaeger_url, trace_id)
    if url is not None:
        inner = f'<a href="{esc(url)}"><code>{esc(trace_id or "")}</code> in Jaeger</a>'
    elif trace_id:
        inner = f"<code>{esc(trace_id)}</code> (no Jaeger URL: <code>mlms trace</code>)"
    else:
        inner = "none yet"
    return f'<td class="trace" data-jaeger-url="{esc(jaeger_url or "")}">{inner}</td>'


def _event_rows(events: LaunchEvents) -> str:
    return "".join(
        f'<tr class="event-{esc(e.type)}"><td>{esc((e.time or "").replace("T", " ")[:19])}</td>'
        f"<td>{esc(e.type)}</td><td>{esc(e.reason)}</td><td>{esc(e.kind)}/{esc(e.name)}</td>"
        f'<td class="wrap">{esc(e.message)}'
        + (f" (x{e.count})" if e.count > 1 else "")
        + "</td></tr>"
        for e in events.items
    )


def _watch(launch_id: str, events: LaunchEvents, log: LogTail) -> str:
    """A cluster launch's Events and agent log, as read when the page was made; the script
    refreshes both (``data-watch-id``) while the launch has not ended."""
    head = "".join(f"<th>{c}</th>" for c in ("time (UTC)", "type", "reason", "object", "message"))
    pod = f" (pod {esc(log.pod)}, container {esc(log.container)})" if log.pod else ""
    return (
        f'<section id="launch-watch" data-watch-id="{esc(launch_id)}" data-tail="{PAGE_TAIL}">'
        f'<h2>Events</h2><p class="note events-reason">{esc(events.reason or "")}</p>'
        f'<div class="scroll"><table class="listing" id="launch-events"><thead><tr>{head}</tr>'
        f"</thead><tbody>{_event_rows(events)}</tbody></table></div>"
        f'<h2>Agent log <span class="log-pod">{pod}</span></h2>'
        f'<p class="note log-reason">{esc(log.reason or "")}</p>'
        f'<pre class="spec log" id="launch-log">{esc(chr(10).join(log.lines))}</pre>'
        "</section>"
    )


def launch_page(
    row: LaunchRow,
    jaeger_url: str | None = None,
    trace_id: str | None = None,
    watched: tuple[LaunchEvents, LogTail] | None = None,
) -> str:
    """One launch: its state (updated without reloading), the run once recorded, the link to
    its trace (``trace_id``: the recorded run's, or the evaluation's), its YAML, and a Cancel
    form while it has not ended; for a launch in the cluster (``watched``) its Events and the
    tail of its agent's log."""
    final = "true" if row.state in FINAL else "false"
    run = (
        f'<a href="{esc(run_url(row.run_id))}">run {esc(row.run_id)}</a>'
        if row.run_id
        else "not recorded yet"
    )
    facts = (
        f'<table class="facts launch" data-launch-id="{esc(row.launch_id)}" data-final="{final}">'
        f"<tr><th>state</th>"
        f'<td class="state state-{esc(row.state)}">{esc(row.state)}</td></tr>'
        f'<tr><th>run</th><td class="run">{run}</td></tr>'
        f"<tr><th>trace</th>{_trace_cell(trace_id, jaeger_url)}</tr>"
        f"<tr><th>evaluation</th><td>{esc(row.evaluation)}</td></tr>"
        + (f"<tr><th>namespace</th><td>{esc(row.namespace)}</td></tr>" if row.namespace else "")
        + f"<tr><th>model</th><td>{esc(row.model_name or '')}</td></tr>"
        f"<tr><th>framework</th><td>{esc(row.framework or '')}</td></tr>"
        + (
            f'<tr><th>sweep</th><td><a href="{esc(sweep_url(row.sweep_id))}">'
            f"{esc(row.sweep_id)}</a></td></tr>"
            if row.sweep_id
            else ""
        )
        + f"<tr><th>created</th><td>{esc(_when(row.created_at))}</td></tr>"
        f'<tr><th>started</th><td class="started">{esc(_when(row.started_at))}</td></tr>'
        f'<tr><th>finished</th><td class="finished">{esc(_when(row.finished_at))}</td></tr>'
        f'<tr><th>message</th><td><pre class="message">{esc(row.message or "")}</pre></td></tr>'
        "</table>"
    )
    cancel = (
        ""
        if row.state in FINAL
        else (
            f'<form id="cancel-form" class="filters" data-launch-id="{esc(row.launch_id)}">'
            '<label>write token<input type="password" name="token" autocomplete="off" '
            'required></label><button type="submit">Cancel launch</button>'
            '<span id="cancel-error" class="error-text"></span></form>'
        )
    )
    body = (
        '<p><a href="/launches">All launches</a> · <a href="/launch">Launch another</a></p>'
        + facts
        + cancel
        + (_watch(row.launch_id, *watched) if watched is not None else "")
        + f'<h2>Spec</h2><pre class="spec">{esc(row.spec)}</pre>'
    )
    return page(f"Launch {row.evaluation}", body + _script())


SCRIPT: Final = """\
"use strict";
(() => {
  const API = "/api/v1/launches";
  const SWEEPS = "/api/v1/sweep-launches";
  const FINAL = new Set(["succeeded", "failed", "cancelled", "interrupted"]);
  const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

  function runLink(runId) {
    const link = document.createElement("a");
    link.href = "/runs/" + encodeURIComponent(runId);
    link.textContent = "run " + runId;
    return link;
  }

  function showTrace(element, traceId, traceUrl) {
    const cell = element.querySelector("td.trace");
    if (!cell || cell.querySelector("a")) return;
    const code = document.createElement("code");
    code.textContent = traceId;
    if (traceUrl) {
      const link = document.createElement("a");
      link.href = traceUrl;
      link.append(code, " in Jaeger");
      cell.replaceChildren(link);
    } else {
      cell.replaceChildren(code, " (no Jaeger URL: mlms trace)");
    }
  }

  async function getJson(url) {
    const answer = await fetch(url, {headers: {Accept: "application/json"},
                                     credentials: "same-origin"});
    return answer.ok ? answer.json() : null;
  }

  function showEvents(watch, events) {
    watch.querySelector(".events-reason").textContent = events.reason || "";
    const rows = events.items.map((event) => {
      const row = document.createElement("tr");
      row.className = "event-" + event.type;
      const message = event.message + (event.count > 1 ? " (x" + event.count + ")" : "");
      for (const value of [(event.time || "").replace("T", " ").slice(0, 19), event.type,
                           event.reason, event.kind + "/" + event.name, message]) {
        const cell = document.createElement("td");
        cell.textContent = value;
        row.append(cell);
      }
      row.lastChild.className = "wrap";
      return row;
    });
    watch.querySelector("#launch-events tbody").replaceChildren(...rows);
    const facts = document.querySelector("table.facts[data-launch-id]");
    if (facts && events.trace_id) showTrace(facts, events.trace_id, events.trace_url);
  }

  function showLog(watch, log) {
    watch.querySelector(".log-reason").textContent = log.reason || "";
    watch.querySelector(".log-pod").textContent = log.pod
      ? " (pod " + log.pod + ", container " + log.container + ")" : "";
    const pre = watch.querySelector("#launch-log");
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.textContent = log.lines.join("\\n");
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  }

  const watch = document.getElementById("launch-watch");
  let watchedAt = 0;
  async function refreshWatch(force) {
    if (!watch || (!force && Date.now() - watchedAt < 3000)) return;
    watchedAt = Date.now();
    const base = API + "/" + encodeURIComponent(watch.dataset.watchId);
    const [events, log] = await Promise.all([
      getJson(base + "/events"),
      getJson(base + "/log?tail=" + encodeURIComponent(watch.dataset.tail))]);
    if (events) showEvents(watch, events);
    if (log) showLog(watch, log);
  }

  function show(element, launch) {
    const state = element.querySelector(".state");
    if (state) {
      state.textContent = launch.state;
      state.className = "state state-" + launch.state;
    }
    const run = element.querySelector(".run");
    if (run && launch.run_id && !run.querySelector("a")) {
      run.replaceChildren(runLink(launch.run_id));
    }
    for (const [name, value] of [["started", launch.started_at],
                                 ["finished", launch.finished_at],
                                 ["message", launch.message]]) {
      const cell = element.querySelector("." + name);
      if (cell && value) cell.textContent = name === "message" ? value
        : value.replace("T", " ").slice(0, 19);
    }
    if (launch.trace_id) showTrace(element, launch.trace_id, launch.trace_url);
    element.dataset.final = FINAL.has(launch.state) ? "true" : "false";
    if (FINAL.has(launch.state) && element.matches("table.facts")) {
      const cancel = document.getElementById("cancel-form");
      if (cancel) cancel.hidden = true;
    }
  }

  function showSweep(element, sweep) {
    show(element, sweep);
    const counts = element.querySelector(".counts");
    if (counts) {
      counts.textContent = Object.entries(sweep.counts).sort()
        .map(([state, count]) => count + " " + state).join(", ");
    }
    for (const child of sweep.children) {
      const row = document.querySelector("[data-child-id='" + CSS.escape(child.launch_id) + "']");
      if (row) show(row, child);
    }
  }

  async function poll(element, url, update, also) {
    let wait = 500;
    let polled = false;
    while (element.dataset.final !== "true") {
      polled = true;
      try {
        const answer = await fetch(url, {headers: {Accept: "application/json"},
                                         credentials: "same-origin"});
        if (answer.ok) update(element, await answer.json());
        if (also) await also(false);
      } catch (error) {
        wait = Math.min(wait * 2, 5000);
      }
      await sleep(wait);
      wait = Math.min(wait + 250, 2000);
    }
    if (polled && also) await also(true).catch(() => null);  // what happened as it ended
  }

  document.querySelectorAll("[data-launch-id]:not(form)").forEach((element) =>
    poll(element, API + "/" + encodeURIComponent(element.dataset.launchId), show,
         element.matches("table.facts") ? refreshWatch : null));
  document.querySelectorAll("[data-sweep-id]:not(form)").forEach((element) =>
    poll(element, SWEEPS + "/" + encodeURIComponent(element.dataset.sweepId), showSweep));

  function headers(form) {
    return {"Content-Type": "application/json", Accept: "application/json",
            Authorization: "Bearer " + form.elements.token.value.trim()};
  }

  const ticked = (form, name) =>
    [...form.querySelectorAll("input[name=" + name + "]:checked")].map((box) => box.value);
  const number = (text) => /^\\d+(\\.\\d+)?$/.test(text) ? Number(text) : text;

  // The hardware fields (a cluster's form only): "key=value, ..." and one toleration a line
  // as `kubectl taint` writes a taint ("key=value:Effect", "key:Effect" for any value).
  const TOLERATION = /^([^=:\\s]+)(?:=([^=:\\s]*))?(?::([^=:\\s]+))?$/;

  function hardware(form, problems) {
    const found = {};
    if (!form.elements.node_selector) return found;
    const selector = {};
    const bad = (field, msg) => problems.push({loc: ["body", "hardware", field], msg: msg});
    for (const pair of form.elements.node_selector.value.split(/[\\s,]+/).filter(Boolean)) {
      const at = pair.indexOf("=");
      if (at < 1) bad("nodeSelector", JSON.stringify(pair) + ": write key=value");
      else selector[pair.slice(0, at)] = pair.slice(at + 1);
    }
    if (Object.keys(selector).length) found.nodeSelector = selector;
    const tolerations = [];
    for (const line of form.elements.tolerations.value.split(/[\\n,]+/)) {
      const text = line.trim();
      if (!text) continue;
      const match = TOLERATION.exec(text);
      if (!match) {
        bad("tolerations", JSON.stringify(text) + ": write key=value:Effect or key:Effect");
        continue;
      }
      const toleration = {key: match[1], operator: match[2] === undefined ? "Exists" : "Equal"};
      if (match[2] !== undefined) toleration.value = match[2];
      if (match[3] !== undefined) toleration.effect = match[3];
      tolerations.push(toleration);
    }
    if (tolerations.length) found.tolerations = tolerations;
    return found;
  }

  function formBody(form, problems) {
    const value = (name) => form.elements[name].value.trim();
    const body = {
      kind: ticked(form, "kind")[0] || "evaluation",
      model: value("model"),
      frameworks: ticked(form, "frameworks"),
      scenario: value("scenario"),
      batch_sizes: value("batch_sizes").split(/[\\s,]+/).filter(Boolean).map(number),
      scenario_settings: {},
    };
    if (value("name")) body.name = value("name");
    if (body.kind === "sweep") {
      body.models = ticked(form, "models");
      body.devices = ticked(form, "devices");
    }
    for (const name of ["minQueryCount", "warmup"]) {
      if (value(name)) body.scenario_settings[name] = number(value(name));
    }
    if (value("minDuration")) body.scenario_settings.minDuration = value("minDuration");
    if (value("dataset_type")) {
      body.dataset = {type: value("dataset_type"), split: value("dataset_split")};
      for (const name of ["path", "masks", "targets", "annotations", "tokenizer"]) {
        if (value("dataset_" + name)) body.dataset[name] = value("dataset_" + name);
      }
      if (value("dataset_max_length")) body.dataset.maxLength = number(value("dataset_max_length"));
      if (value("dataset_limit")) body.dataset.limit = number(value("dataset_limit"));
    }
    const task = {};
    if (value("task_type")) task.type = value("task_type");
    if (value("task_output")) task.output = value("task_output");
    if (value("task_classes")) task.numClasses = number(value("task_classes"));
    if (value("task_range")) task.dataRange = number(value("task_range"));
    const detection = {};
    if (value("task_box_format")) detection.boxFormat = value("task_box_format");
    if (form.elements.task_normalized.checked) detection.normalized = true;
    if (value("task_score_threshold")) {
      detection.scoreThreshold = number(value("task_score_threshold"));
    }
    if (value("task_nms_iou")) detection.nmsIou = number(value("task_nms_iou"));
    if (Object.keys(detection).length) task.detection = detection;
    if (Object.keys(task).length) body.task = task;
    const placed = {};
    if (body.kind === "evaluation" && value("device") === "gpu") {
      placed.device = "gpu";
      if (value("gpus")) placed.gpus = number(value("gpus"));
    }
    Object.assign(placed, hardware(form, problems));
    if (Object.keys(placed).length) body.hardware = placed;
    return body;
  }

  function showErrors(form, answer, detail) {
    const general = document.getElementById("launch-error");
    form.querySelectorAll("[data-errors-for]").forEach((span) => span.replaceChildren());
    general.hidden = true;
    const rest = [];
    if (Array.isArray(detail)) {
      for (const problem of detail) {
        const field = problem.loc && problem.loc[0] === "body" ? String(problem.loc[1]) : "";
        const errorsFor = (name) =>
          form.querySelector("[data-errors-for='" + CSS.escape(name) + "']");
        const span = (problem.loc.length > 2 && errorsFor(field + "." + problem.loc[2]))
          || errorsFor(field);
        const text = problem.loc.slice(1).join(".") + ": " + problem.msg;
        if (span) {
          const line = document.createElement("span");
          line.className = "field-error";
          line.textContent = text;
          span.append(line);
        } else {
          rest.push(text);
        }
      }
    } else {
      rest.push("HTTP " + answer.status + ": " + (detail || answer.statusText));
    }
    if (rest.length) {
      general.textContent = rest.join("\\n");
      general.hidden = false;
    }
  }

  async function send(form, dryRun) {
    const problems = [];
    const body = formBody(form, problems);
    if (problems.length) {
      showErrors(form, null, problems);
      return;
    }
    const answer = await fetch(API + (dryRun ? "?dry_run=true" : ""),
      {method: "POST", headers: headers(form), body: JSON.stringify(body)});
    let data = null;
    try { data = await answer.json(); } catch (error) { data = null; }
    if (!answer.ok) {
      showErrors(form, answer, data && data.detail);
      return;
    }
    showErrors(form, answer, []);
    document.getElementById("preview-yaml").textContent = data.yaml;
    if (!dryRun) {
      const launches = data.launches;
      window.location.assign(data.sweep
        ? "/sweep-launches/" + encodeURIComponent(data.sweep.sweep_id)
        : launches.length === 1
          ? "/launches/" + encodeURIComponent(launches[0].launch_id) : "/launches");
    }
  }

  const form = document.getElementById("launch-form");
  if (form) {
    const sweepOnly = () => {
      const sweep = ticked(form, "kind")[0] === "sweep";
      form.querySelectorAll(".sweep-only").forEach((fieldset) => { fieldset.hidden = !sweep; });
      form.querySelectorAll(".evaluation-only").forEach((fieldset) => { fieldset.hidden = sweep; });
    };
    form.querySelectorAll("input[name=kind]").forEach((radio) =>
      radio.addEventListener("change", sweepOnly));
    sweepOnly();
    const pool = form.elements.pool;
    // The GPU count with device gpu; a note while a pool with GPUs is chosen and no gpu device.
    const showDevice = () => {
      const device = form.elements.device.value;
      document.getElementById("gpu-count").hidden = device !== "gpu";
      const gpu = ticked(form, "kind")[0] === "sweep" ? ticked(form, "devices").includes("gpu")
        : device === "gpu";
      const note = document.getElementById("pool-cpus");
      if (note) note.hidden = gpu || !(Number(pool.selectedOptions[0].dataset.gpus) > 0);
    };
    form.addEventListener("change", showDevice);
    showDevice();
    if (pool) {
      pool.addEventListener("change", () => {
        const chosen = pool.selectedOptions[0];
        form.elements.node_selector.value = chosen ? chosen.dataset.nodeSelector || "" : "";
        form.elements.tolerations.value = chosen ? chosen.dataset.tolerations || "" : "";
      });
    }
    form.addEventListener("submit", (event) => { event.preventDefault(); send(form, false); });
    document.getElementById("preview").addEventListener("click", () => {
      if (form.reportValidity()) send(form, true);
    });
  }

  const cancel = document.getElementById("cancel-form");
  if (cancel) {
    cancel.addEventListener("submit", async (event) => {
      event.preventDefault();
      const sweep = cancel.dataset.sweepId;
      const url = (sweep ? SWEEPS + "/" + encodeURIComponent(sweep)
        : API + "/" + encodeURIComponent(cancel.dataset.launchId)) + "/cancel";
      const answer = await fetch(url, {method: "POST", headers: headers(cancel)});
      const data = await answer.json().catch(() => ({}));
      const error = document.getElementById("cancel-error");
      if (answer.ok) {
        error.textContent = "";
        const facts = document.querySelector("table.facts[data-launch-id], table.sweep");
        if (facts) (sweep ? showSweep : show)(facts, data);
      } else {
        error.textContent = "HTTP " + answer.status + ": " + (data.detail || answer.statusText);
      }
    });
  }
})();
"""
"""The Launch pages' script (``/static/launch.js``)."""
