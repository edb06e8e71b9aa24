"""Texts to token arrays through a Hugging Face ``tokenizer.json`` (the tokenizers library):
the three inputs a BERT-style model takes, padded or truncated to one length."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlmodelscope.agent.tasks.data import DatasetError
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import Dataset

TOKEN_FIELDS = ("input_ids", "attention_mask", "token_type_ids")
"""The fields a text dataset offers model inputs, in the order BERT takes them."""


@dataclass(frozen=True)
class Tokens:
    """Every text's tokens as (N, max_length) int64 arrays, and each text's tokenizing time."""

    fields: dict[str, np.ndarray]
    latencies_ns: np.ndarray
    truncated: int
    """How many texts had more tokens than ``max_length`` and were cut."""


def load_tokenizer(path: Path) -> Any:
    """The tokenizer in ``path`` (a tokenizer.json); a missing or unreadable file is a
    :class:`DatasetError` naming it."""
    from tokenizers import Tokenizer

    if not path.is_file():
        raise DatasetError(f"{path}: no such tokenizer file (a tokenizer.json)")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises a bare Exception with serde's message
        raise DatasetError(f"{path}: not a tokenizers tokenizer.json ({exc})") from None


def dataset_tokenizer(dataset: Dataset, base_dir: Path | None) -> Any:
    """The tokenizer a text dataset names (``dataset.tokenizer``, a local path, file:// or
    pvc:// URI), read now; a :class:`SpecError` on that field when it cannot be."""
    from mlmodelscope.agent.sources import local_path

    field = "spec.dataset.tokenizer"
    if dataset.tokenizer is None:
        raise SpecError(field, "required for a text dataset: a tokenizer.json")
    path = local_path(dataset.tokenizer, base_dir=base_dir, field=field)
    try:
        return load_tokenizer(path)
    except DatasetError as exc:
        raise SpecError(field, str(exc)) from None


def tokenize(tokenizer: Any, texts: Sequence[str], max_length: int) -> Tokens:
    """Each text on its own (so its time is its own, as each image's preprocessing is),
    truncated to ``max_length`` tokens by the tokenizer (its special tokens, e.g. BERT's
    [CLS] and [SEP], kept) and padded with its pad token ([PAD] or <pad>, else id 0)."""
    count = len(texts)
    fields = {name: np.zeros((count, max_length), dtype=np.int64) for name in TOKEN_FIELDS}
    latencies = np.empty(count, dtype=np.int64)
    truncated = 0
    tokenizer.enable_truncation(max_length)
    pad_id, pad_token = _pad(tokenizer)
    tokenizer.enable_padding(length=max_length, pad_id=pad_id, pad_token=pad_token)
    for i, text in enumerate(texts):
        start = time.perf_counter_ns()
        encoding = tokenizer.encode(text)
        fields["input_ids"][i] = encoding.ids
        fields["attention_mask"][i] = encoding.attention_mask
        fields["token_type_ids"][i] = encoding.type_ids
        latencies[i] = time.perf_counter_ns() - start
        truncated += bool(encoding.overflowing)
    return Tokens(fields, latencies, truncated)


def _pad(tokenizer: Any) -> tuple[int, str]:
    for token in ("[PAD]", "<pad>"):
        if (found := tokenizer.token_to_id(token)) is not None:
            return int(found), token
    return 0, "[PAD]"
