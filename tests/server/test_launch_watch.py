"""Watching a cluster launch (issue 32, "Watch"): the Kubernetes Events of its ModelEvaluation,
Job and pods, the tail of its agent's log and the link to its trace, through the API and on
the launch's page, against the shared fake API server. What the API server answers is
untrusted: redacted in the answers, escaped on the page. The pure parts are tested alone."""

from __future__ import annotations

from typing import Any, Final

import pytest
from launch_fixtures import DIGITS, NS, cluster_client, launch_client, launch_in, set_phase

from fakes import FakeApiServer, FakeKube
from mlmodelscope.contract.kube import JOB_NAME_LABEL, KubeError, job_path, pod_path
from mlmodelscope.contract.redact import REDACTED
from mlmodelscope.server.launch_watch import (
    MAX_TEXT,
    NOT_IN_CLUSTER,
    EventRecord,
    event_records,
    log_lines,
    newest_first,
)
from mlmodelscope.server.pages.launch import SCRIPT

JOB: Final = "digits-cnn-onnxruntime-1a2b3c4d"
OLD_POD: Final = f"{JOB}-aaaaa"
POD: Final = f"{JOB}-bbbbb"
TRACE: Final = "0af7651916cd43dd8448eb211c80319c"
HOSTILE: Final = "<script>alert('owned')</script>"
LEAKY: Final = "pulling https://robot:hunter22@registry.example.com/model.onnx"
JAEGER: Final = "http://jaeger.example.com:16686"


def _event(name: str, kind: str, obj: str, when: str, message: str, **more: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": {"kind": kind, "name": obj, "namespace": NS, **more},
        "type": "Warning" if "Back-off" in message else "Normal",
        "reason": name.split(".")[-1],
        "message": message,
        "lastTimestamp": when,
        "count": 1,
    }


def _run_in_cluster(api: FakeApiServer, evaluation: str, uid: str) -> None:
    """What the operator and the Job controller leave in NS for a running evaluation: its
    status naming the Job and the trace, the Job, two pods (the newer one's agent has
    logged), and Events about each, one of another evaluation and one of an older object of
    the same name."""
    set_phase(api, evaluation, phase="Running", jobName=JOB, traceID=TRACE)
    api.seed(job_path(NS), {"metadata": {"name": JOB}, "spec": {}})
    for name, created in ((OLD_POD, "2024-05-01T10:00:00Z"), (POD, "2024-05-01T10:01:00Z")):
        pod = {
            "metadata": {"name": name, "labels": {JOB_NAME_LABEL: JOB},
                         "creationTimestamp": created},
            "spec": {"containers": [{"name": "agent"}, {"name": "sidecar"}]},
        }  # fmt: skip
        api.seed(pod_path(NS), pod)
    api.seed(pod_path(NS), {"metadata": {"name": "other-pod", "labels": {JOB_NAME_LABEL: "x"}}})
    events = [
        _event("e1.Admitted", "ModelEvaluation", evaluation, "2024-05-01T09:59:00Z",
               "admitted", uid=uid),
        _event("e0.Old", "ModelEvaluation", evaluation, "2024-04-01T00:00:00Z",
               "an earlier object of that name", uid="uid-earlier"),
        _event("e2.SuccessfulCreate", "Job", JOB, "2024-05-01T10:00:00Z",
               f"Created pod: {OLD_POD}"),
        _event("e3.BackOff", "Pod", OLD_POD, "2024-05-01T10:00:30Z", "Back-off restarting"),
        _event("e5.Pulling", "Pod", POD, "2024-05-01T10:01:05Z", LEAKY),
        _event("e4.Started", "Pod", POD, "2024-05-01T10:01:02Z", HOSTILE),
        _event("e6.Other", "Pod", "other-pod", "2024-05-01T10:02:00Z", "not this launch"),
    ]  # fmt: skip
    for event in events:
        api.seed(f"/api/v1/namespaces/{NS}/events", event)
    lines = [f"line {i}" for i in range(1, 8)] + [HOSTILE, LEAKY]
    api.logs[(NS, POD, "agent")] = "\n".join(lines) + "\n"
    api.logs[(NS, POD, "sidecar")] = "not the agent\n"
    api.logs[(NS, OLD_POD, "agent")] = "the first try\n"


def _started(client: Any, api: FakeApiServer) -> dict[str, Any]:
    [item] = launch_in(client, DIGITS)
    _run_in_cluster(api, item["evaluation"], item["resource_uid"])
    return item


def test_events_are_the_evaluation_job_and_pods_newest_last_and_redacted(sqlite_url: str) -> None:
    api = FakeApiServer()
    api.add_namespace(NS)
    with cluster_client(sqlite_url, api, jaeger_url=JAEGER) as client:
        item = _started(client, api)
        answer = client.get(f"/api/v1/launches/{item['launch_id']}/events")
        assert answer.status_code == 200, answer.text
        found = answer.json()
    assert (found["applies"], found["reason"], found["job"]) == (True, None, JOB)
    assert found["pods"] == [OLD_POD, POD]
    assert found["trace_id"] == TRACE
    assert found["trace_url"] == f"{JAEGER}/trace/{TRACE}"
    seen = [(e["kind"], e["name"], e["reason"]) for e in found["items"]]
    assert seen == [
        ("ModelEvaluation", item["evaluation"], "Admitted"),
        ("Job", JOB, "SuccessfulCreate"),
        ("Pod", OLD_POD, "BackOff"),
        ("Pod", POD, "Started"),
        ("Pod", POD, "Pulling"),
    ]
    messages = [e["message"] for e in found["items"]]
    assert HOSTILE in messages  # JSON carries the text as it is; the page escapes it
    assert "hunter22" not in answer.text and REDACTED in messages[-1]
    assert found["items"][2]["type"] == "Warning"
    assert found["items"][0]["time"] == "2024-05-01T09:59:00Z"


def test_the_log_is_the_tail_of_the_agent_in_the_newest_pod(sqlite_url: str) -> None:
    api = FakeApiServer()
    api.add_namespace(NS)
    with cluster_client(sqlite_url, api) as client:
        [item] = launch_in(client, DIGITS)
        url = f"/api/v1/launches/{item['launch_id']}/log"
        before = client.get(url).json()
        assert (before["applies"], before["lines"], before["reason"]) == (True, [], "no Job yet")
        _run_in_cluster(api, item["evaluation"], item["resource_uid"])
        answer = client.get(url, params={"tail": 3})
        assert answer.status_code == 200, answer.text
        found = answer.json()
        assert (found["pod"], found["container"], found["tail"]) == (POD, "agent", 3)
        assert found["lines"][:2] == ["line 7", HOSTILE]
        assert "hunter22" not in answer.text and REDACTED in found["lines"][2]
        assert found["reason"] is None
        assert len(client.get(url).json()["lines"]) == 9  # fewer than the default 100
        for bad in (0, 501, "x"):
            assert client.get(url, params={"tail": bad}).status_code == 422

        del api.logs[(NS, POD, "agent")]  # the newest pod's agent has not started
        waiting = client.get(url).json()
        assert waiting["lines"] == [] and waiting["pod"] == POD
        assert "HTTP 400" in waiting["reason"] and "waiting to start" in waiting["reason"]


def test_the_launch_page_shows_events_log_and_trace_escaped(sqlite_url: str) -> None:
    api = FakeApiServer()
    api.add_namespace(NS)
    with cluster_client(sqlite_url, api, jaeger_url=JAEGER) as client:
        item = _started(client, api)
        page = client.get(f"/launches/{item['launch_id']}")
        assert page.status_code == 200
        text = page.text
    assert "<script>alert" not in text
    assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt;" in text  # event and log line
    assert text.count("&lt;script&gt;alert") == 2
    assert "hunter22" not in text
    assert f'<section id="launch-watch" data-watch-id="{item["launch_id"]}"' in text
    assert f"Created pod: {OLD_POD}" in text and "line 7" in text
    assert f"pod {POD}, container agent" in text
    assert f'href="{JAEGER}/trace/{TRACE}"' in text
    assert "not this launch" not in text and "the first try" not in text
    for piece in ("/events", "/log?tail=", "refreshWatch", "showTrace", "textContent"):
        assert piece in SCRIPT


def test_a_recorded_run_gives_the_launch_its_trace(sqlite_url: str) -> None:
    api = FakeApiServer()
    api.add_namespace(NS)
    run_id = "6f1c2a4e-1d2b-4c3a-9e8f-0a1b2c3d4e5f"
    with cluster_client(sqlite_url, api, jaeger_url=JAEGER) as client:
        [item] = launch_in(client, DIGITS)
        store = client.app.state.store  # type: ignore[attr-defined]
        recorded = {run_id: {"run_id": run_id, "trace_id": TRACE}}
        store.get = recorded.get
        assert client.get(f"/api/v1/launches/{item['launch_id']}").json()["trace_id"] is None
        set_phase(api, item["evaluation"], phase="Succeeded", runId=run_id)
        done = client.get(f"/api/v1/launches/{item['launch_id']}").json()
    assert (done["state"], done["trace_id"]) == ("succeeded", TRACE)
    assert done["trace_url"] == f"{JAEGER}/trace/{TRACE}"


def test_events_and_log_need_the_read_token_and_a_known_launch(sqlite_url: str) -> None:
    api = FakeApiServer()
    api.add_namespace(NS)
    with cluster_client(sqlite_url, api) as client:
        [item] = launch_in(client, DIGITS)
        for tail in ("events", "log"):
            url = f"/api/v1/launches/{item['launch_id']}/{tail}"
            assert client.get(url, headers={"Authorization": ""}).status_code == 401
            assert client.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert client.get(f"/api/v1/launches/nope/{tail}").status_code == 404


def test_a_gone_evaluation_or_a_refused_read_answers_empty_with_the_reason(
    sqlite_url: str,
) -> None:
    api = FakeApiServer()
    api.add_namespace(NS)
    with cluster_client(sqlite_url, api) as client:
        item = _started(client, api)
        base = f"/api/v1/launches/{item['launch_id']}"

        def refuse_events(request: Any) -> None:
            if request.target.resource == "events":
                raise KubeError(403, request.method, request.path, '{"message": "forbidden"}')

        api.before = refuse_events
        partial = client.get(f"{base}/events").json()
        assert partial["items"] == [] and partial["job"] == JOB
        assert "cannot read the Events of Job" in partial["reason"]
        assert "HTTP 403: forbidden" in partial["reason"]
        api.before = None
        api.handle("DELETE", f"/apis/mlmodelscope.io/v1alpha1/namespaces/{NS}/modelevaluations/"
                   f"{item['evaluation']}", None, {})  # fmt: skip
        gone = client.get(f"{base}/log").json()
        assert gone["lines"] == [] and "is gone" in gone["reason"]
        events = client.get(f"{base}/events").json()
        assert "is gone" in events["reason"]
        assert [e["reason"] for e in events["items"]] == ["Admitted"]  # Events outlive it


def test_a_local_launch_answers_that_events_and_log_are_for_the_cluster(sqlite_url: str) -> None:
    with launch_client(sqlite_url, workers=0) as client:
        [item] = launch_in(client, DIGITS)
        base = f"/api/v1/launches/{item['launch_id']}"
        events = client.get(f"{base}/events").json()
        log = client.get(f"{base}/log").json()
        page = client.get(f"/launches/{item['launch_id']}").text
    assert (events["applies"], events["items"], events["reason"]) == (False, [], NOT_IN_CLUSTER)
    assert (log["applies"], log["lines"], log["reason"]) == (False, [], NOT_IN_CLUSTER)
    assert 'id="launch-watch"' not in page


def test_event_records_are_oldest_first_bounded_and_counted_once() -> None:
    events = [
        {"metadata": {"uid": "b"}, "reason": "B", "lastTimestamp": "2024-01-01T00:00:02Z"},
        {"metadata": {"uid": "a"}, "reason": "A", "eventTime": "2024-01-01T00:00:01.000000Z"},
        {"metadata": {"uid": "b"}, "reason": "B", "lastTimestamp": "2024-01-01T00:00:02Z"},
        {"metadata": {"uid": "c"}, "reason": "C", "series": {"count": 4,
         "lastObservedTime": "2024-01-01T00:00:03Z"}},
        {"metadata": {"uid": "d"}, "reason": "D"},
    ]  # fmt: skip
    records = event_records(events)
    assert [r.reason for r in records] == ["D", "A", "B", "C"]
    assert records[0].time is None and records[-1].count == 4
    assert [r.reason for r in event_records(events, limit=2)] == ["B", "C"]
    long = EventRecord.of({"message": "x" * (MAX_TEXT + 10), "type": "Normal"})
    assert len(long.message) == MAX_TEXT and long.message.endswith("…")


def test_log_lines_keep_the_tail_redacted() -> None:
    text = "a\nb\nhttps://u:secretpw@h.example/x\n"
    assert log_lines(text, 2) == ["b", f"https://{REDACTED}@h.example/x"]
    assert log_lines(text, 0) == []
    assert log_lines("", 5) == []


def test_newest_first_orders_pods_by_creation() -> None:
    pods = [
        {"metadata": {"name": "p1", "creationTimestamp": "2024-01-01T00:00:01Z"}},
        {"metadata": {"name": "p3", "creationTimestamp": "2024-01-01T00:00:02Z"}},
        {"metadata": {"name": "p2", "creationTimestamp": "2024-01-01T00:00:02Z"}},
    ]
    assert newest_first(pods) == ["p3", "p2", "p1"]


def test_the_fake_serves_logs_as_the_kubelet_does() -> None:
    api = FakeApiServer()
    api.add_namespace(NS)
    kube = FakeKube(api)
    api.seed(pod_path(NS), {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}})
    api.logs[(NS, "p", "c")] = "one\ntwo\nthree\n"
    log = f"{pod_path(NS, 'p')}/log"
    assert kube.text(log) == "one\ntwo\nthree\n"  # the only container
    assert kube.text(log, {"container": "c", "tailLines": "2"}) == "two\nthree\n"
    assert kube.text(log, {"tailLines": "2", "limitBytes": "5"}) == "two\nt"
    for params, status in (({"container": "nope"}, 400), ({}, 404)):
        path = log if status == 400 else f"{pod_path(NS, 'q')}/log"
        with pytest.raises(KubeError) as refused:
            kube.text(path, params)
        assert refused.value.status == status
    assert kube.requests[("get", "pods/log")] == 5
