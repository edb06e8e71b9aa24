"""The dashboard's Launch pages as HTML (TestClient): the form over the catalog, the launch
pages with their state, the script they load from the app, and the CSP every page carries."""

from __future__ import annotations

from launch_fixtures import DIGITS, WRITE, launch_client
from serve_fixtures import READ_TOKEN

from mlmodelscope.server.dashboard import CSP
from mlmodelscope.server.pages.launch import SCRIPT, SCRIPT_PATH


def test_the_launch_form_offers_the_catalog(sqlite_url: str) -> None:
    with launch_client(sqlite_url, workers=0) as client:
        page = client.get("/launch")
        assert page.status_code == 200
        assert page.headers["content-security-policy"] == CSP
        assert "script-src 'self';" in CSP  # no inline script
        text = page.text
        assert '<form id="launch-form"' in text
        for name in ("digits-cnn", "resnet50", "digits-cnn-scale-255"):
            assert f'<option value="{name}"' in text
        for framework in ("onnxruntime", "pytorch", "tensorflow"):
            assert f'name="frameworks" value="{framework}"' in text
        for scenario in ("SingleStream", "MultiStream", "Server", "Offline"):
            assert f'<option value="{scenario}">' in text
        assert 'name="batch_sizes"' in text and 'type="password" name="token"' in text
        assert f'<script src="{SCRIPT_PATH}" defer></script>' in text
        assert "<script>" not in text  # no inline script: the CSP would block it
        script = client.get(SCRIPT_PATH, headers={"Authorization": ""})
        assert script.status_code == 200 and script.text == SCRIPT
        assert script.headers["content-type"].startswith("text/javascript")
        assert "innerHTML" not in SCRIPT  # values from the server go in as text
    with launch_client(sqlite_url, workers=0, catalog=()) as client:
        assert "start mlms serve with --catalog" in client.get("/launch").text


def test_launch_pages_show_the_state_and_poll_it(sqlite_url: str) -> None:
    with launch_client(sqlite_url, workers=0) as client:
        form = {**DIGITS, "frameworks": ["onnxruntime", "pytorch"]}
        launches = client.post("/api/v1/launches", json=form, headers=WRITE).json()["launches"]
        first = launches[0]["launch_id"]
        page = client.get(f"/launches/{first}")
        assert page.status_code == 200
        assert f'data-launch-id="{first}" data-final="false"' in page.text
        assert '<td class="state state-queued">queued</td>' in page.text
        assert 'id="cancel-form"' in page.text
        assert "modelRef: {name: digits-cnn}" in page.text
        listing = client.get("/launches").text
        assert all(f'<tr data-launch-id="{i["launch_id"]}"' in listing for i in launches)
        client.post(f"/api/v1/launches/{first}/cancel", headers=WRITE)
        page = client.get(f"/launches/{first}").text
        assert 'data-final="true"' in page and 'id="cancel-form"' not in page
        missing = client.get("/launches/00000000-0000-4000-8000-000000000000")
        assert missing.status_code == 404 and "No launch" in missing.text
        assert missing.headers["content-security-policy"] == CSP
    with launch_client(sqlite_url, workers=0) as client:
        client.headers.pop("Authorization")
        assert client.get("/launch").status_code == 401  # reads need the read token
        assert client.get(f"/launch?token={READ_TOKEN}").status_code == 200


def test_a_sweep_launch_page_lists_its_children(sqlite_url: str) -> None:
    with launch_client(sqlite_url, workers=0) as client:
        form = {**DIGITS, "kind": "sweep", "frameworks": ["onnxruntime", "pytorch"]}
        sweep = client.post("/api/v1/launches", json=form, headers=WRITE).json()["sweep"]
        assert 'name="kind" value="sweep"' in client.get("/launch").text
        url = f"/sweep-launches/{sweep['sweep_id']}"
        page = client.get(url)
        assert page.status_code == 200 and page.headers["content-security-policy"] == CSP
        text = page.text
        assert f'data-sweep-id="{sweep["sweep_id"]}" data-final="false"' in text
        assert '<td class="state state-queued">queued</td>' in text
        assert '<td class="counts">4 queued</td>' in text
        for child in sweep["children"]:  # updated from the sweep's poll, not each its own
            assert f'<tr data-child-id="{child["launch_id"]}" data-final="false">' in text
        assert "data-launch-id" not in text
        assert 'id="cancel-form"' in text and "Cancel sweep" in text
        assert "kind: EvaluationSweep" in text
        listing = client.get("/launches").text
        assert listing.count(f'<a href="{url}">digits-cnn</a>') == 4
        child = client.get(f"/launches/{sweep['children'][0]['launch_id']}").text
        assert f'<a href="{url}">' in child
        client.post(f"/api/v1/sweep-launches/{sweep['sweep_id']}/cancel", headers=WRITE)
        text = client.get(url).text
        assert 'data-final="true"' in text and 'id="cancel-form"' not in text
        assert '<td class="counts">4 cancelled</td>' in text
        missing = client.get("/sweep-launches/00000000-0000-4000-8000-000000000000")
        assert missing.status_code == 404 and "No sweep launch" in missing.text
