"""Build the reference models and data of examples/tasks: a text classifier with BERT's three
inputs and its tokenizer, a segmentation network and a detector on rendered shapes, and a
denoiser on noisy smooth shapes, each trained here in seconds on generated data and exported
to ONNX, TorchScript and a TensorFlow SavedModel with the same weights.

    python examples/tasks/train_tasks.py --out DIR

writes DIR/text/{train,eval}.jsonl, DIR/text/tokenizer.json, DIR/text-classifier.onnx,
DIR/text-classifier.torchscript.pt, DIR/shapes/{images,masks}/ (the evaluation set),
DIR/shapes/instances.json (the same images' boxes, COCO), DIR/pairs/{noisy,clean}/ (the
denoising evaluation pairs), and for each of text-classifier, segmenter, detector and denoiser
a .onnx, a .torchscript.pt and a .savedmodel folder; last,
DIR/manifest.json. The agent's
``mlmodelscope.agent.tasks.reference.ensure_task_models`` runs it once per machine and caches
the result.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional

SEED = 0
TOPICS = {
    "food": "bread soup cheese apple rice pasta salad spice oven bake taste dinner",
    "sport": "goal match team score coach league ball runner race win season player",
    "tech": "chip code server cloud laptop network bug compile data robot phone app",
    "weather": "rain snow wind storm cloudy sunny forecast cold heat fog thunder frost",
}
FILLER = [
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "that",
    "on",
    "with",
    "for",
    "was",
    "as",
    "at",
    "by",
    "this",
    "we",
    "they",
]
MAX_LENGTH = 32
SHAPE_SIZE = 48


# ------------------------------------------------------------------------------------ text


def write_corpus(path: Path, count: int, rng: np.random.Generator) -> None:
    """Sentences of filler and topic words; about two in five are longer than MAX_LENGTH
    tokens, so truncation is exercised. Labels are the topic names (strings)."""
    names = sorted(TOPICS)
    with path.open("w") as handle:
        for _ in range(count):
            label = names[int(rng.integers(len(names)))]
            words = TOPICS[label].split()
            length = int(rng.integers(4, 48))
            picked = [
                words[int(rng.integers(len(words)))]
                if rng.random() < 0.35
                else FILLER[int(rng.integers(len(FILLER)))]
                for _ in range(length)
            ]
            handle.write(json.dumps({"text": " ".join(picked), "label": label}) + "\n")


def train_tokenizer(corpus: Path, out: Path) -> Any:
    """A word-level tokenizer with BERT's [CLS] text [SEP] template and [PAD] id 0."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    trainer = trainers.WordLevelTrainer(special_tokens=specials)
    texts = [json.loads(line)["text"] for line in corpus.read_text().splitlines()]
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[(t, tokenizer.token_to_id(t)) for t in ("[CLS]", "[SEP]")],
    )
    tokenizer.save(str(out))
    return tokenizer


class TextClassifier(nn.Module):
    """Token and token-type embeddings, mean-pooled over the attention mask, then an MLP."""

    def __init__(self, vocab: int, classes: int, dim: int = 32) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.types = nn.Embedding(2, dim)
        self.hidden = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, classes)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        x = self.tokens(input_ids) + self.types(token_type_ids)
        mask = attention_mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        out: torch.Tensor = self.head(torch.relu(self.hidden(pooled)))
        return out


def encode(tokenizer: Any, corpus: Path) -> tuple[list[torch.Tensor], torch.Tensor]:
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    names = sorted({r["label"] for r in rows})
    tokenizer.enable_truncation(MAX_LENGTH)
    tokenizer.enable_padding(length=MAX_LENGTH, pad_id=0, pad_token="[PAD]")
    encodings = [tokenizer.encode(r["text"]) for r in rows]
    fields = [
        torch.tensor([getattr(e, name) for e in encodings], dtype=torch.int64)
        for name in ("ids", "attention_mask", "type_ids")
    ]
    labels = torch.tensor([names.index(r["label"]) for r in rows], dtype=torch.int64)
    return fields, labels


def build_text(out: Path) -> dict[str, Any]:
    folder = out / "text"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(SEED)
    write_corpus(folder / "train.jsonl", 2000, rng)
    write_corpus(folder / "eval.jsonl", 400, rng)
    tokenizer = train_tokenizer(folder / "train.jsonl", folder / "tokenizer.json")
    fields, labels = encode(tokenizer, folder / "train.jsonl")
    model = TextClassifier(tokenizer.get_vocab_size(), len(TOPICS))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(12):
        for start in range(0, len(labels), 100):
            part = slice(start, start + 100)
            loss = functional.cross_entropy(model(*(f[part] for f in fields)), labels[part])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    eval_fields, eval_labels = encode(tokenizer, folder / "eval.jsonl")
    with torch.no_grad():
        accuracy = float((model(*eval_fields).argmax(1) == eval_labels).float().mean())
    export(
        model, [f[:2] for f in eval_fields], names, ["logits"], out / "text-classifier",
        savedmodel_text,
    )  # fmt: skip
    return {"vocab": tokenizer.get_vocab_size(), "classes": sorted(TOPICS), "accuracy": accuracy}


# ---------------------------------------------------------------------------- segmentation


class Segmenter(nn.Module):
    """Two stride-2 convolutions, a dilated one, upsampled back and added to a full-size
    skip: class scores [N, 4, H, W] (background and the three shapes)."""

    def __init__(self, classes: int = 4, width: int = 24) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.down1 = nn.Conv2d(width, width, 3, stride=2, padding=1)
        self.down2 = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.context = nn.Conv2d(2 * width, 2 * width, 3, padding=2, dilation=2)
        self.coarse = nn.Conv2d(2 * width, classes, 1)
        self.fine = nn.Conv2d(width, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = torch.relu(self.stem(x))
        y = torch.relu(self.context(torch.relu(self.down2(torch.relu(self.down1(skip))))))
        up = functional.interpolate(self.coarse(y), scale_factor=4.0, mode="bilinear")
        out: torch.Tensor = up + self.fine(skip)
        return out


def shapes_tensors(
    count: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, list[list[tuple[int, list[int]]]]]:
    """Rendered shapes: images [N, 3, H, W] in [0, 1], masks [N, H, W] and each image's
    objects (category id, pixel xywh)."""
    from mlmodelscope.agent.tasks.shapes import render

    rng = np.random.default_rng(seed)
    images, masks, objects = [], [], []
    for _ in range(count):
        image, mask, found = render(rng, SHAPE_SIZE, SHAPE_SIZE, 4)
        images.append(image)
        masks.append(mask)
        objects.append(found)
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 255.0
    return x, torch.from_numpy(np.stack(masks)).long(), objects


def build_segmenter(out: Path) -> dict[str, Any]:
    from mlmodelscope.agent.tasks.shapes import write_shapes

    write_shapes(out / "shapes", 64, seed=SEED + 1, height=SHAPE_SIZE, width=SHAPE_SIZE)
    x, y, _ = shapes_tensors(768, SEED + 2)
    model = Segmenter()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(15):
        for start in range(0, len(y), 64):
            part = slice(start, start + 64)
            loss = functional.cross_entropy(model(x[part]), y[part])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    export(model, [x[:2]], ["input"], ["logits"], out / "segmenter", savedmodel_segmenter)
    return {
        "classes": ["background", "square", "disc", "triangle"],
        "loss": round(float(loss.detach()), 4),
    }


# ------------------------------------------------------------------------------- detection

GRID = 6
"""Cells per side of the detector's output grid (48 px / stride 8)."""


class Detector(nn.Module):
    """A one-scale grid detector (YOLO v1 in miniature): per cell an objectness, three class
    scores and a box (centre offset in the cell, size as a fraction of the image). Its forward
    decodes them: boxes [N, 36, 4] (normalised cxcywh), scores [N, 36] (objectness times the
    best class probability) and classes [N, 36] (COCO category ids 1-3, as floats); the
    evaluation applies the threshold and NMS."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, width, 3, padding=1), nn.ReLU()]
        channels = width
        for _ in range(3):
            layers += [nn.Conv2d(channels, channels * 3 // 2, 3, stride=2, padding=1), nn.ReLU()]
            channels = channels * 3 // 2
        layers += [nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Conv2d(channels, 8, 1)
        ys, xs = torch.meshgrid(torch.arange(GRID), torch.arange(GRID), indexing="ij")
        self.register_buffer("cells", torch.stack([xs, ys], -1).reshape(1, -1, 2).float())

    def raw(self, x: torch.Tensor) -> torch.Tensor:
        """[N, 36, 8]: objectness logit, 3 class logits, 4 box logits, cells row by row."""
        out: torch.Tensor = self.head(self.body(x)).flatten(2).transpose(1, 2)
        return out

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raw = self.raw(x)
        box = torch.sigmoid(raw[..., 4:])
        centre = (self.cells + box[..., :2]) / GRID
        boxes = torch.cat([centre, box[..., 2:]], -1)
        best, index = torch.softmax(raw[..., 1:4], -1).max(-1)
        scores = torch.sigmoid(raw[..., 0]) * best
        return boxes, scores, (index + 1).float()


def grid_targets(objects: list[list[tuple[int, list[int]]]]) -> torch.Tensor:
    """[N, 36, 6]: is-object, class index, box (cell offset x, y, width, height fractions);
    a cell with two centres keeps the larger object."""
    target = torch.zeros(len(objects), GRID * GRID, 6)
    cell = SHAPE_SIZE / GRID
    for n, found in enumerate(objects):
        for category, (x, y, w, h) in sorted(found, key=lambda o: o[1][2] * o[1][3]):
            cx, cy = x + w / 2, y + h / 2
            col, row = min(int(cx // cell), GRID - 1), min(int(cy // cell), GRID - 1)
            target[n, row * GRID + col] = torch.tensor(
                [1, category - 1, cx / cell - col, cy / cell - row, w / SHAPE_SIZE, h / SHAPE_SIZE]
            )
    return target


def build_detector(out: Path) -> dict[str, Any]:
    x, _, objects = shapes_tensors(1024, SEED + 3)
    target = grid_targets(objects)
    model = Detector()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    for _ in range(20):
        for start in range(0, len(x), 64):
            part = slice(start, start + 64)
            raw, t = model.raw(x[part]), target[part]
            positive = t[..., 0] > 0
            loss = functional.binary_cross_entropy_with_logits(raw[..., 0], t[..., 0])
            loss = loss + functional.cross_entropy(raw[positive][:, 1:4], t[positive][:, 1].long())
            loss = loss + 5 * functional.l1_loss(
                torch.sigmoid(raw[positive][:, 4:]), t[positive][:, 2:]
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    export(
        model, [x[:2]], ["input"], ["boxes", "scores", "classes"], out / "detector",
        savedmodel_detector,
    )  # fmt: skip
    return {"grid": GRID, "loss": round(float(loss.detach()), 4)}


# ---------------------------------------------------------------------------- image to image

NOISE_SIGMA = 0.1
"""The Gaussian noise's standard deviation, a fraction of 255 (about 20 dB of PSNR)."""


class Denoiser(nn.Module):
    """DnCNN in miniature: four 3x3 convolutions (ReLU between) predict the noise, which the
    forward subtracts from its input: a denoised image [N, 3, H, W] in about [0, 1]."""

    def __init__(self, width: int = 24, layers: int = 4) -> None:
        super().__init__()
        sizes = [3, *[width] * (layers - 1), 3]
        self.convs = nn.ModuleList(
            nn.Conv2d(a, b, 3, padding=1) for a, b in itertools.pairwise(sizes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for conv in self.convs[:-1]:
            y = torch.relu(conv(y))
        out: torch.Tensor = x - self.convs[-1](y)
        return out


def noisy_pairs(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy inputs and clean targets [N, 3, H, W] in [0, 1], both 8-bit as the PNGs are."""
    from mlmodelscope.agent.tasks.shapes import add_noise, render_smooth

    rng = np.random.default_rng(seed)
    noisy, clean = [], []
    for _ in range(count):
        image = render_smooth(rng, SHAPE_SIZE, SHAPE_SIZE)
        clean.append(image)
        noisy.append(add_noise(image, rng, NOISE_SIGMA))

    def tensor(images: list[np.ndarray]) -> torch.Tensor:
        return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 255.0

    return tensor(noisy), tensor(clean)


def build_denoiser(out: Path) -> dict[str, Any]:
    """Trained on random 24x24 crops of 512 noisy/clean pairs (mean squared error, one-cycle
    learning rate), evaluated on 64 other pairs written as PNG folders."""
    from mlmodelscope.agent.tasks.shapes import write_pairs

    write_pairs(out / "pairs", 64, seed=SEED + 4, sigma=NOISE_SIGMA,
                height=SHAPE_SIZE, width=SHAPE_SIZE)  # fmt: skip
    x, y = noisy_pairs(512, SEED + 5)
    crops = np.random.default_rng(SEED + 6)
    model = Denoiser()
    epochs, batch, crop = 6, 8, 24
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=0.003, total_steps=epochs * (len(x) // batch)
    )
    began = time.monotonic()
    for _ in range(epochs):
        order = torch.randperm(len(x))
        for start in range(0, len(x), batch):
            part = order[start : start + batch]
            top, left = (int(v) for v in crops.integers(0, SHAPE_SIZE - crop + 1, size=2))
            window = (..., slice(top, top + crop), slice(left, left + crop))
            loss = functional.mse_loss(model(x[part][window]), y[part][window])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    trained = round(time.monotonic() - began, 1)
    model.eval()
    export(model, [x[:2]], ["input"], ["restored"], out / "denoiser", savedmodel_denoiser)
    return {"noise_sigma": NOISE_SIGMA, "loss": round(float(loss.detach()), 6), "train_s": trained}


# -------------------------------------------------------------------------------- tensorflow


def _tf_module(model: nn.Module, name: str) -> tuple[Any, dict[str, Any]]:
    """A tf.Module holding ``model``'s weights as variables: convolutions OIHW -> HWIO,
    linear (out, in) -> (in, out), embeddings as they are."""
    import tensorflow as tf

    module = tf.Module(name=name)
    weights: dict[str, Any] = {}
    for key, tensor in model.state_dict().items():
        value = tensor.detach().numpy()
        if value.ndim == 4:
            value = value.transpose(2, 3, 1, 0)
        elif value.ndim == 2 and not key.endswith(("tokens.weight", "types.weight")):
            value = value.T.copy()
        weights[key] = tf.Variable(value, name=key.replace(".", "_"))
    module.weights_by_name = weights
    return module, weights


def _conv(x: Any, w: Any, b: Any, stride: int = 1, pad: int = 0, dilation: int = 1) -> Any:
    """PyTorch's Conv2d in NHWC: explicit symmetric padding (TF's SAME pads stride-2
    convolutions on one side only)."""
    import tensorflow as tf

    padding = [[0, 0], [pad, pad], [pad, pad], [0, 0]]
    return tf.nn.conv2d(x, w, stride, padding, dilations=dilation) + b


def _save(module: Any, serve: Any, specs: list[Any], path: Path) -> None:
    import tensorflow as tf

    module.serve = tf.function(serve, input_signature=specs)
    tf.saved_model.save(
        module, str(path), signatures={"serving_default": module.serve.get_concrete_function()}
    )


def savedmodel_text(model: TextClassifier, path: Path) -> None:
    import tensorflow as tf

    module, w = _tf_module(model, "text_classifier")

    def serve(input_ids: Any, attention_mask: Any, token_type_ids: Any) -> dict[str, Any]:
        x = tf.gather(w["tokens.weight"], input_ids) + tf.gather(w["types.weight"], token_type_ids)
        mask = tf.cast(attention_mask, tf.float32)[..., None]
        pooled = tf.reduce_sum(x * mask, 1) / tf.maximum(tf.reduce_sum(mask, 1), 1.0)
        hidden = tf.nn.relu(tf.matmul(pooled, w["hidden.weight"]) + w["hidden.bias"])
        return {"logits": tf.matmul(hidden, w["head.weight"]) + w["head.bias"]}

    specs = [
        tf.TensorSpec([None, MAX_LENGTH], tf.int64, name=n)
        for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    _save(module, serve, specs, path)


def savedmodel_segmenter(model: Segmenter, path: Path) -> None:
    import tensorflow as tf

    module, w = _tf_module(model, "segmenter")

    def serve(input: Any) -> dict[str, Any]:  # the argument name is the signature's input key
        x = tf.transpose(input, [0, 2, 3, 1])
        skip = tf.nn.relu(_conv(x, w["stem.weight"], w["stem.bias"], pad=1))
        y = tf.nn.relu(_conv(skip, w["down1.weight"], w["down1.bias"], 2, 1))
        y = tf.nn.relu(_conv(y, w["down2.weight"], w["down2.bias"], 2, 1))
        y = tf.nn.relu(_conv(y, w["context.weight"], w["context.bias"], 1, 2, 2))
        coarse = _conv(y, w["coarse.weight"], w["coarse.bias"])
        up = tf.image.resize(coarse, [SHAPE_SIZE, SHAPE_SIZE], method="bilinear")
        out = up + _conv(skip, w["fine.weight"], w["fine.bias"])
        return {"logits": tf.transpose(out, [0, 3, 1, 2])}

    _save(
        module,
        serve,
        [tf.TensorSpec([None, 3, SHAPE_SIZE, SHAPE_SIZE], tf.float32, name="input")],
        path,
    )


def savedmodel_detector(model: Detector, path: Path) -> None:
    import tensorflow as tf

    module, w = _tf_module(model, "detector")
    convs = [k.removesuffix(".weight") for k in w if k.startswith("body.") and k.endswith("weight")]
    cells = tf.constant(model.cells.numpy())

    def serve(input: Any) -> dict[str, Any]:
        x = tf.transpose(input, [0, 2, 3, 1])
        for index, name in enumerate(convs):
            stride = 1 if index in (0, len(convs) - 1) else 2
            x = tf.nn.relu(_conv(x, w[f"{name}.weight"], w[f"{name}.bias"], stride, 1))
        raw = tf.reshape(_conv(x, w["head.weight"], w["head.bias"]), [-1, GRID * GRID, 8])
        box = tf.sigmoid(raw[..., 4:])
        boxes = tf.concat([(cells + box[..., :2]) / GRID, box[..., 2:]], -1)
        probabilities = tf.nn.softmax(raw[..., 1:4], -1)
        scores = tf.sigmoid(raw[..., 0]) * tf.reduce_max(probabilities, -1)
        classes = tf.cast(tf.argmax(probabilities, -1) + 1, tf.float32)
        return {"boxes": boxes, "scores": scores, "classes": classes}

    _save(
        module,
        serve,
        [tf.TensorSpec([None, 3, SHAPE_SIZE, SHAPE_SIZE], tf.float32, name="input")],
        path,
    )


def savedmodel_denoiser(model: Denoiser, path: Path) -> None:
    import tensorflow as tf

    module, w = _tf_module(model, "denoiser")
    count = len(model.convs)

    def serve(input: Any) -> dict[str, Any]:
        x = tf.transpose(input, [0, 2, 3, 1])
        y = x
        for index in range(count):
            y = _conv(y, w[f"convs.{index}.weight"], w[f"convs.{index}.bias"], pad=1)
            y = tf.nn.relu(y) if index < count - 1 else y
        return {"restored": tf.transpose(x - y, [0, 3, 1, 2])}

    _save(
        module,
        serve,
        [tf.TensorSpec([None, 3, SHAPE_SIZE, SHAPE_SIZE], tf.float32, name="input")],
        path,
    )


def check_savedmodel(
    model: nn.Module, example: list[torch.Tensor], names: list[str], outputs: list[str], path: Path
) -> None:
    """The SavedModel's outputs equal PyTorch's to 1e-4 on ``example``."""
    import tensorflow as tf

    signature = tf.saved_model.load(str(path)).signatures["serving_default"]
    got = signature(**{n: tf.constant(t.numpy()) for n, t in zip(names, example, strict=True)})
    with torch.no_grad():
        want = model(*example)
    wanted = [want] if isinstance(want, torch.Tensor) else list(want)
    for name, tensor in zip(outputs, wanted, strict=True):
        if float(np.abs(got[name].numpy() - tensor.numpy()).max()) > 1e-4:
            raise RuntimeError(f"{path.name}: TensorFlow and PyTorch differ on {name}")


# ---------------------------------------------------------------------------------- export


def export(
    model: nn.Module,
    example: list[torch.Tensor],
    names: list[str],
    outputs: list[str],
    stem: Path,
    savedmodel: Any,
) -> None:
    """ONNX (dynamic batch), TorchScript and a SavedModel (``savedmodel`` writes it) of the
    same weights; ONNX Runtime and TensorFlow must agree with PyTorch."""
    import warnings

    import onnxruntime as ort

    axes = {n: {0: "batch"} for n in [*names, *outputs]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, tuple(example), str(stem.with_suffix(".onnx")), input_names=names,
            output_names=outputs, dynamic_axes=axes, opset_version=17, dynamo=False,
        )  # fmt: skip
        with torch.no_grad():
            traced = torch.jit.trace(model, tuple(example), check_trace=False)
    traced.save(str(stem.with_suffix(".torchscript.pt")))
    session = ort.InferenceSession(
        str(stem.with_suffix(".onnx")), providers=["CPUExecutionProvider"]
    )
    got = session.run(None, {n: t.numpy() for n, t in zip(names, example, strict=True)})
    with torch.no_grad():
        want = model(*example)
    for g, w in zip(got, [want] if isinstance(want, torch.Tensor) else want, strict=True):
        if float(np.abs(g - w.numpy()).max()) > 1e-4:
            raise RuntimeError(f"{stem.name}: ONNX Runtime and PyTorch differ")
    savedmodel(model, stem.with_suffix(".savedmodel"))
    check_savedmodel(model, example, names, outputs, stem.with_suffix(".savedmodel"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True)
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    manifest: dict[str, Any] = {}
    for name, build in (
        ("text", build_text),
        ("segmentation", build_segmenter),
        ("detection", build_detector),
        ("image-to-image", build_denoiser),
    ):
        start = time.monotonic()
        manifest[name] = {**build(out), "seconds": round(time.monotonic() - start, 1)}
    manifest["torch"] = torch.__version__
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(json.dumps(manifest))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
