"""Well-known architectures in plain PyTorch, compact, with random weights: timing models.

torchvision is not installed (and downloads weights), so each network is written out from its
paper's table. Parameters shrink a network for tests (resolution, width, depth) without
changing its structure. Accuracy is not the point: the layers, shapes and FLOPs are.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
from torch import nn


def conv_bn(
    cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: Any = nn.ReLU
) -> nn.Sequential:
    """Conv (no bias) -> BatchNorm -> activation, the block every CNN here repeats."""
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            conv_bn(cin, width, 3, stride), conv_bn(width, width, 3, act=None)
        )
        self.skip = (
            conv_bn(cin, width, 1, stride, act=None)
            if stride != 1 or cin != width
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.body = nn.Sequential(
            conv_bn(cin, width, 1),
            conv_bn(width, width, 3, stride),
            conv_bn(width, cout, 1, act=None),
        )
        self.skip = (
            conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


class ResNet(nn.Module):
    """He et al. 2016: 18 = BasicBlock [2,2,2,2], 50 = Bottleneck [3,4,6,3]."""

    def __init__(self, depth: int = 18, num_classes: int = 1000, width: int = 64) -> None:
        super().__init__()
        block: type[BasicBlock] | type[Bottleneck] = BasicBlock if depth == 18 else Bottleneck
        counts = {18: (2, 2, 2, 2), 50: (3, 4, 6, 3)}[depth]
        self.stem = nn.Sequential(conv_bn(3, width, 7, 2), nn.MaxPool2d(3, 2, 1))
        layers: list[nn.Module] = []
        cin = width
        for stage, count in enumerate(counts):
            w = width * 2**stage
            for i in range(count):
                layers.append(block(cin, w, 2 if i == 0 and stage > 0 else 1))
                cin = w * block.expansion
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        out: torch.Tensor = self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))
        return out


class InvertedResidual(nn.Module):
    """MobileNetV2's block (and, with squeeze-excitation and SiLU, EfficientNet's MBConv)."""

    def __init__(
        self,
        cin: int,
        cout: int,
        stride: int,
        expand: int,
        k: int = 3,
        se: bool = False,
        act: Any = nn.ReLU6,
    ) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(conv_bn(cin, hidden, 1, act=act))
        layers.append(conv_bn(hidden, hidden, k, stride, groups=hidden, act=act))
        if se:
            layers.append(SqueezeExcite(hidden, max(1, cin // 4)))
        layers.append(conv_bn(hidden, cout, 1, act=None))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        out: torch.Tensor = x + y if self.residual else y
        return out


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, reduced: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        s = torch.sigmoid(self.expand(nn.functional.silu(self.reduce(s))))
        return x * s


def _round(channels: float, divisor: int = 8) -> int:
    return max(divisor, int(channels + divisor / 2) // divisor * divisor)


class MobileNetV2(nn.Module):
    """Sandler et al. 2018, Table 2 (t, c, n, s); ``width`` is the width multiplier."""

    CONFIG = (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    )

    def __init__(self, num_classes: int = 1000, width: float = 1.0) -> None:
        super().__init__()
        cin = _round(32 * width)
        layers: list[nn.Module] = [conv_bn(3, cin, 3, 2, act=nn.ReLU6)]
        for t, c, n, s in self.CONFIG:
            cout = _round(c * width)
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        last = _round(1280 * max(1.0, width))
        layers.append(conv_bn(cin, last, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(last, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        out: torch.Tensor = self.head(torch.flatten(x, 1))
        return out


class EfficientNetB0(nn.Module):
    """Tan & Le 2019, Table 1 (expand, k, stride, channels, repeats), SiLU and squeeze-excite."""

    CONFIG = (
        (1, 3, 1, 16, 1),
        (6, 3, 2, 24, 2),
        (6, 5, 2, 40, 2),
        (6, 3, 2, 80, 3),
        (6, 5, 1, 112, 3),
        (6, 5, 2, 192, 4),
        (6, 3, 1, 320, 1),
    )

    def __init__(self, num_classes: int = 1000, width: float = 1.0, depth: float = 1.0) -> None:
        super().__init__()
        cin = _round(32 * width)
        layers: list[nn.Module] = [conv_bn(3, cin, 3, 2, act=nn.SiLU)]
        for e, k, s, c, n in self.CONFIG:
            cout = _round(c * width)
            for i in range(max(1, math.ceil(n * depth))):
                layers.append(
                    InvertedResidual(cin, cout, s if i == 0 else 1, e, k, se=True, act=nn.SiLU)
                )
                cin = cout
        last = _round(1280 * width)
        layers.append(conv_bn(cin, last, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(last, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        out: torch.Tensor = self.head(torch.flatten(x, 1))
        return out


class VGG16(nn.Module):
    """Simonyan & Zisserman 2015, configuration D; the classifier sees a 7x7 map at 224 px."""

    CONFIG = (
        64,
        64,
        "M",
        128,
        128,
        "M",
        256,
        256,
        256,
        "M",
        512,
        512,
        512,
        "M",
        512,
        512,
        512,
        "M",
    )

    def __init__(
        self, num_classes: int = 1000, width: float = 1.0, resolution: int = 224, hidden: int = 4096
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for item in self.CONFIG:
            if item == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                cout = max(8, int(int(item) * width))
                layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU()]
                cin = cout
        self.features = nn.Sequential(*layers)
        side = resolution // 32
        self.classifier = nn.Sequential(
            nn.Linear(cin * side * side, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.classifier(torch.flatten(self.features(x), 1))
        return out


class EncoderLayer(nn.Module):
    """A post-norm transformer encoder layer written out (Q, K, V projections, scaled dot
    product, softmax, GELU feed-forward), so the ONNX graph shows BERT's real MatMuls."""

    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden, eps=1e-12)
        self.ffn = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))
        self.norm2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        scores = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(h // self.heads), dim=-1)
        context = (scores @ v).transpose(1, 2).reshape(b, s, h)
        x = self.norm1(x + self.proj(context))
        out: torch.Tensor = self.norm2(x + self.ffn(x))
        return out


class BertEncoder(nn.Module):
    """BERT-base (Devlin et al. 2019): token + position embeddings, 12 layers of hidden 768,
    12 heads, feed-forward 3072; returns the final hidden states [batch, seq, hidden]."""

    position_ids: torch.Tensor

    def __init__(
        self,
        layers: int = 12,
        hidden: int = 768,
        heads: int = 12,
        ffn: int = 3072,
        vocab: int = 30522,
        max_seq: int = 512,
    ) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(max_seq, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.Sequential(*(EncoderLayer(hidden, heads, ffn) for _ in range(layers)))
        # A buffer moves with the module, so a TorchScript trace made on the CPU also runs on
        # CUDA; torch.arange(..., device=input_ids.device) would bake the tracing device in.
        self.register_buffer("position_ids", torch.arange(max_seq).unsqueeze(0), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = self.position_ids[:, : input_ids.shape[1]]
        x = self.norm(self.tokens(input_ids) + self.positions(positions))
        out: torch.Tensor = self.layers(x)
        return out


class MLP(nn.Module):
    """A plain multilayer perceptron: Gemm + ReLU, the simplest timing model."""

    def __init__(
        self, features: int = 784, hidden: int = 1024, layers: int = 3, num_classes: int = 10
    ) -> None:
        super().__init__()
        dims = [features] + [hidden] * layers
        body: list[nn.Module] = []
        for a, b in itertools.pairwise(dims):
            body += [nn.Linear(a, b), nn.ReLU()]
        self.body = nn.Sequential(*body, nn.Linear(dims[-1], num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.body(x)
        return out


def randomize(model: nn.Module, seed: int) -> nn.Module:
    """Seeded weights and non-trivial batch-norm statistics, in eval mode (inference graphs)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                fan_in = module.weight[0].numel()
                module.weight.copy_(
                    torch.randn(module.weight.shape, generator=generator) / math.sqrt(fan_in)
                )
                if module.bias is not None:
                    module.bias.copy_(0.01 * torch.randn(module.bias.shape, generator=generator))
            elif isinstance(module, nn.BatchNorm2d):
                n = module.num_features
                module.weight.copy_(1 + 0.1 * torch.randn(n, generator=generator))
                module.bias.copy_(0.1 * torch.randn(n, generator=generator))
                module.running_mean.copy_(  # type: ignore[union-attr]
                    0.1 * torch.randn(n, generator=generator)
                )
                module.running_var.copy_(  # type: ignore[union-attr]
                    0.5 + torch.rand(n, generator=generator)
                )
            elif isinstance(module, nn.Embedding):
                module.weight.copy_(0.02 * torch.randn(module.weight.shape, generator=generator))
    return model.eval()
