"""The zoo's entries: which architecture, its full-size and test-size parameters, its inputs.

Full size is the paper's network at its usual input (224 px images, BERT at 128 tokens);
``small`` shrinks resolution, width or depth for tests while keeping every layer type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[int | str, ...]
    """Dimensions; "batch" is the dynamic batch axis."""
    dtype: str


@dataclass(frozen=True)
class ZooEntry:
    name: str
    description: str
    params: Mapping[str, Any]
    small: Mapping[str, Any]
    keras: str | None = None
    """The ``keras.applications`` class for a SavedModel (same architecture, other weights)."""
    output: str = "logits"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def resolve(
        self, overrides: Mapping[str, Any] | None = None, small: bool = False
    ) -> dict[str, Any]:
        """Full-size parameters, replaced by ``small`` ones and then by ``overrides``; an
        unknown key is an error naming the accepted ones."""
        params = {**self.params, **(self.small if small else {})}
        for key in overrides or {}:
            if key not in self.params:
                raise ValueError(
                    f"params: {self.name} has no parameter {key!r}; it takes {sorted(self.params)}"
                )
        return {**params, **(overrides or {})}

    def inputs(self, params: Mapping[str, Any]) -> list[InputSpec]:
        if "seq_len" in params:
            return [InputSpec("input_ids", ("batch", int(params["seq_len"])), "int64")]
        if "features" in params:
            return [InputSpec("input", ("batch", int(params["features"])), "float32")]
        r = int(params["resolution"])
        return [InputSpec("input", ("batch", 3, r, r), "float32")]


IMAGE_SMALL = {"resolution": 32}
ENTRIES: dict[str, ZooEntry] = {
    e.name: e
    for e in (
        ZooEntry("resnet18", "ResNet-18 (He et al. 2016), BasicBlock [2,2,2,2]",
                 {"resolution": 224, "width": 64}, {**IMAGE_SMALL, "width": 8}),
        ZooEntry("resnet50", "ResNet-50 (He et al. 2016), Bottleneck [3,4,6,3]",
                 {"resolution": 224, "width": 64}, {**IMAGE_SMALL, "width": 8}, keras="ResNet50"),
        ZooEntry("mobilenet_v2", "MobileNetV2 (Sandler et al. 2018), width 1.0",
                 {"resolution": 224, "width": 1.0}, {**IMAGE_SMALL, "width": 0.25},
                 keras="MobileNetV2"),
        ZooEntry("efficientnet_b0", "EfficientNet-B0 (Tan & Le 2019), SiLU and squeeze-excite",
                 {"resolution": 224, "width": 1.0, "depth": 1.0},
                 {**IMAGE_SMALL, "width": 0.25, "depth": 0.34}, keras="EfficientNetB0"),
        ZooEntry("vgg16", "VGG-16 (Simonyan & Zisserman 2015), configuration D",
                 {"resolution": 224, "width": 1.0, "hidden": 4096},
                 {**IMAGE_SMALL, "width": 0.125, "hidden": 64}, keras="VGG16"),
        ZooEntry("bert_base", "BERT-base encoder (Devlin et al. 2019): 12 x hidden 768, 12 heads",
                 {"seq_len": 128, "layers": 12, "hidden": 768, "heads": 12, "ffn": 3072,
                  "vocab": 30522},
                 {"seq_len": 16, "layers": 2, "hidden": 64, "heads": 4, "ffn": 128, "vocab": 1000},
                 output="hidden_states"),
        ZooEntry("mlp", "A 3-hidden-layer perceptron (784 -> 1024 x 3 -> 10)",
                 {"features": 784, "hidden": 1024, "layers": 3}, {"hidden": 32}),
    )
}  # fmt: skip
"""Every zoo model by name."""


def entry(name: str) -> ZooEntry:
    """The entry called ``name``, or an error listing the zoo."""
    try:
        return ENTRIES[name]
    except KeyError:
        raise ValueError(f"name: no zoo model {name!r}; choose one of {sorted(ENTRIES)}") from None


def torch_factory(name: str) -> Callable[[Mapping[str, Any]], Any]:
    """A function building the entry's ``torch.nn.Module`` (imports torch when called)."""

    def build(params: Mapping[str, Any]) -> Any:
        from mlmodelscope.zoo import architectures as a

        p = dict(params)
        if name in ("resnet18", "resnet50"):
            return a.ResNet(18 if name == "resnet18" else 50, width=int(p["width"]))
        if name == "mobilenet_v2":
            return a.MobileNetV2(width=float(p["width"]))
        if name == "efficientnet_b0":
            return a.EfficientNetB0(width=float(p["width"]), depth=float(p["depth"]))
        if name == "vgg16":
            return a.VGG16(
                width=float(p["width"]), resolution=int(p["resolution"]), hidden=int(p["hidden"])
            )
        if name == "bert_base":
            return a.BertEncoder(
                layers=int(p["layers"]), hidden=int(p["hidden"]), heads=int(p["heads"]),
                ffn=int(p["ffn"]), vocab=int(p["vocab"]), max_seq=max(512, int(p["seq_len"])),
            )  # fmt: skip
        if name == "mlp":
            return a.MLP(
                features=int(p["features"]), hidden=int(p["hidden"]), layers=int(p["layers"])
            )
        raise ValueError(f"name: no zoo model {name!r}")

    return build
