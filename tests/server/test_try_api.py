"""Try an image (``POST /api/v1/try`` and the ``/try`` form): a digit of scikit-learn's digits,
drawn as a PNG, classified alike by the digits CNN in ONNX Runtime, PyTorch and TensorFlow;
and every refusal: a body or image too large, a file that is no image, a try without the
write token, a form field that is wrong, a form posted from another site, too many tries."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from launch_fixtures import WRITE, launch_client
from serve_fixtures import READ_TOKEN, WRITE_TOKEN, bearer
from try_fixtures import FRAMEWORKS, digit_png, noise_png, try_form

from mlmodelscope.server.trials import RateLimiter, TryError, check_length

NOT_AN_IMAGE = b"%PDF-1.7\n" + b"not an image " * 20


def test_an_uploaded_digit_becomes_the_digits_sample() -> None:
    from mlmodelscope.agent.digits import DIGITS_INK, DIGITS_SHAPE, digits_image, digits_split

    image, _ = digit_png(5)
    sample = digits_image(image)
    assert sample.shape == DIGITS_SHAPE and sample.dtype == np.float32
    np.testing.assert_allclose(sample, digits_split("test")[0][5], atol=DIGITS_INK / 255 / 2)


def test_the_rate_limit_refills_one_try_every_60_over_n_seconds() -> None:
    now = [0.0]
    limiter = RateLimiter(2, clock=lambda: now[0])
    assert limiter.take("a") is None and limiter.take("a") is None
    assert limiter.take("a") == pytest.approx(30.0)
    assert limiter.take("b") is None  # per client
    now[0] = 30.0
    assert limiter.take("a") is None
    assert limiter.take("a") == pytest.approx(30.0)


def test_a_body_without_a_length_or_over_the_bound_is_refused_unread() -> None:
    with pytest.raises(TryError) as missing:
        check_length(None, 1000)
    assert missing.value.status == 411
    with pytest.raises(TryError) as large:
        check_length(str(1000 + 64 * 1024 + 1), 1000)
    assert large.value.status == 413 and large.value.problems[0][0] == "file"
    check_length(str(1000 + 64 * 1024), 1000)


@pytest.mark.slow
@pytest.mark.frameworks
def test_a_digit_gets_the_same_top3_in_three_frameworks(sqlite_url: str, pvc_root: Path) -> None:
    image, label = digit_png(0)
    with launch_client(sqlite_url, workers=0) as client:
        first = client.post("/api/v1/try", headers=WRITE, **try_form(image))
        assert first.status_code == 200, first.text
        answer = first.json()
        assert answer["agree"] is True and answer["kept"] is False
        assert answer["image"] == {"format": "PNG", "width": 8, "height": 8, "bytes": len(image)}
        results = answer["results"]
        assert [r["framework"] for r in results] == FRAMEWORKS
        tops = {tuple(c["index"] for c in r["top"]) for r in results}
        assert len(tops) == 1 and next(iter(tops))[0] == label
        for result in results:
            assert result["ok"] and result["error"] is None, result
            assert result["probabilities"] is True
            assert [c["label"] for c in result["top"]] == [str(c["index"]) for c in result["top"]]
            scores = [c["score"] for c in result["top"]]
            assert scores == sorted(scores, reverse=True) and 0.5 < scores[0] <= 1
            assert result["latency_ms"] > 0 and result["load_ms"] > result["latency_ms"]
            assert result["warmup_ms"] is not None and result["device"] == "cpu"
        again = client.post("/api/v1/try", headers=WRITE, **try_form(image, k=5)).json()
        for result in again["results"]:  # kept loaded: no load, no warm-up
            assert result["load_ms"] is None and result["warmup_ms"] is None
            assert len(result["top"]) == 5 and result["latency_ms"] > 0


def test_an_oversized_upload_is_refused(sqlite_url: str) -> None:
    with launch_client(sqlite_url, workers=0) as client:
        body = client.post("/api/v1/try", headers=WRITE, **try_form(noise_png(1100)))
        assert body.status_code == 413, body.text  # from its Content-Length, before reading
        assert "at most 1048576 bytes" in body.json()["detail"]
        file = client.post("/api/v1/try", headers=WRITE, **try_form(noise_png(1040)))
        assert file.status_code == 413, file.text  # the body fits, the file does not
        assert file.json()["detail"].startswith("file: ")
    with launch_client(sqlite_url, workers=0, try_max_pixels=32) as client:
        pixels = client.post("/api/v1/try", headers=WRITE, **try_form(digit_png()[0]))
        assert pixels.status_code == 413
        assert "8x8 pixels" in pixels.json()["detail"]


def test_a_file_that_is_no_image_is_refused(sqlite_url: str) -> None:
    image, _ = digit_png()
    with launch_client(sqlite_url, workers=0) as client:
        for data in (NOT_AN_IMAGE, image[: len(image) // 2], b"GIF89a" + b"\0" * 4):
            answer = client.post("/api/v1/try", headers=WRITE, **try_form(data, name="x.png"))
            assert answer.status_code == 415, answer.text
            assert answer.json()["detail"].startswith("file: not an image this server reads")
        empty = client.post("/api/v1/try", headers=WRITE, **try_form(b""))
        assert empty.status_code == 422
        assert empty.json()["detail"][0]["loc"] == ["body", "file"]


def test_a_try_needs_the_write_token(sqlite_url: str) -> None:
    image, _ = digit_png()
    with launch_client(sqlite_url, workers=0) as client:
        none = client.post("/api/v1/try", headers={"Authorization": ""}, **try_form(image))
        assert none.status_code == 401
        read = client.post("/api/v1/try", headers=bearer(READ_TOKEN), **try_form(image))
        assert read.status_code == 403
    with launch_client(sqlite_url, workers=0, write_token=None) as client:
        unwritable = client.post("/api/v1/try", headers=bearer(READ_TOKEN), **try_form(image))
        assert unwritable.status_code == 403
        assert "writes are disabled" in unwritable.json()["detail"]


@pytest.mark.parametrize(
    ("form", "loc", "message"),
    [
        ({"model": "no-such-model"}, ["body", "model"], "no Model 'no-such-model'"),
        (
            {"model": "bert-base-sst2", "frameworks": ["onnxruntime"]},
            ["body", "tokenizer"],
            "give the tokenizer.json this Model's texts are tokenized with",
        ),
        ({"frameworks": ["caffe"]}, ["body", "frameworks", 0], "onnxruntime"),
        ({"frameworks": ["pytorch", "pytorch"]}, ["body", "frameworks", 1], "given twice"),
        ({"k": 0}, ["body", "k"], "greater than or equal to 1"),
        ({"k": 11}, ["body", "k"], "less than or equal to 10"),
    ],
)
def test_every_form_field_is_validated(
    sqlite_url: str, form: dict[str, object], loc: list[object], message: str
) -> None:
    image, _ = digit_png()
    with launch_client(sqlite_url, workers=0) as client:
        answer = client.post("/api/v1/try", headers=WRITE, **try_form(image, **form))  # type: ignore[arg-type]
        assert answer.status_code == 422, answer.text
        [problem] = answer.json()["detail"]
        assert problem["loc"] == loc
        assert message in problem["msg"]


def test_tries_are_rate_limited_per_client(sqlite_url: str) -> None:
    with launch_client(sqlite_url, workers=0, try_per_minute=2) as client:
        statuses = [
            client.post("/api/v1/try", headers=WRITE, **try_form(NOT_AN_IMAGE)).status_code
            for _ in range(2)
        ]
        assert statuses == [415, 415]  # a refused upload counts too
        third = client.post("/api/v1/try", headers=WRITE, **try_form(NOT_AN_IMAGE))
        assert third.status_code == 429
        assert 1 <= int(third.headers["Retry-After"]) <= 30
        assert "at most 2 a minute" in third.json()["detail"]


# ------------------------------------------------------------------------------ the page


def test_the_page_shows_the_form_with_the_catalogs_models(sqlite_url: str) -> None:
    with launch_client(sqlite_url, workers=0) as client:
        page = client.get("/try")
        assert page.status_code == 200
        assert "script-src 'self'" in page.headers["content-security-policy"]
        text = page.text
        assert 'enctype="multipart/form-data"' in text and 'action="/try"' in text
        assert '<option value="digits-cnn">digits-cnn (image-classification)</option>' in text
        for framework in FRAMEWORKS:
            assert f'value="{framework}" checked' in text
        assert "<script" not in text


def test_a_form_posted_from_another_site_is_refused(sqlite_url: str) -> None:
    image, _ = digit_png()
    form = try_form(image)
    form["data"] = {**form["data"], "token": WRITE_TOKEN}
    with launch_client(sqlite_url, workers=0) as client:
        for headers in (
            {"Origin": "https://evil.example"},
            {"Origin": "null"},
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site"},
        ):
            answer = client.post("/try", headers=headers, **form)
            assert answer.status_code == 403, headers
            assert "posted from another site" in answer.text


def test_the_page_shows_each_problem_next_to_its_field(sqlite_url: str) -> None:
    image, _ = digit_png()
    with launch_client(sqlite_url, workers=0) as client:
        client.cookies.set("mlms_token", WRITE_TOKEN)  # the cookie never writes
        form = try_form(image, frameworks=["caffe"], k=0)
        form["data"] = {**form["data"], "model": "nope", "token": ""}
        answer = client.post("/try", headers={"Origin": "http://testserver"}, **form)
        assert answer.status_code == 422
        for field, text in (
            ("model", "no Model &#x27;nope&#x27;"),
            ("frameworks", "&#x27;caffe&#x27; is not one of"),
            ("k", "a whole number from 1 to 10"),
            ("token", "write token is needed"),
        ):
            assert text in _next_to(answer.text, field), field
        cases = (
            (READ_TOKEN, image, 403, "token", "may only read"),
            ("not-a-token", image, 401, "token", "unknown bearer token"),
            (WRITE_TOKEN, NOT_AN_IMAGE, 415, "file", "not an image this server reads"),
            (WRITE_TOKEN, noise_png(1100), 413, "file", "at most 1048576 bytes"),
        )
        for token, data, status, field, text in cases:
            form = try_form(data)
            form["data"] = {**form["data"], "token": token}
            answer = client.post("/try", **form)
            assert answer.status_code == status, (token, answer.text)
            assert text in _next_to(answer.text, field)


def _next_to(page: str, field: str) -> str:
    """The errors shown beside ``field``."""
    found = re.search(
        rf'data-errors-for="{field}">((?:<span class="field-error">.*?</span>)*)</span>', page
    )
    assert found, f"no errors beside {field}"
    return found.group(1)
