"""The ModelEvaluation spec: what to evaluate, on what data, how, and on which hardware.

Field docstrings become the CRD's descriptions (``kubectl explain``), so write them for users.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    field_validator,
)

from mlmodelscope.spec.base import (
    Duration,
    Rule,
    SpecModel,
    exactly_one_of,
    parse_duration,
    quoted,
)
from mlmodelscope.spec.labels import (
    LABEL_KEY_FIX,
    LABEL_VALUE_PATTERN,
    MAX_LABEL_KEY,
    LabelValue,
    is_label_key,
    label_key_cel,
    label_keys_rule,
)

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$"
URI_PATTERN = r"^(file://|https?://|s3://|pvc://|/|\.{0,2}/?[A-Za-z0-9_])"
SHA256_PATTERN = r"^[a-f0-9]{64}$"
OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
"""A Kubernetes object name (DNS subdomain)."""
QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
"""A non-negative Kubernetes resource quantity (k8s.io/apimachinery resource.Quantity), e.g.
'500m', '4Gi', '1.5', '1e3'."""
MAX_JOB_SECONDS = 2**31 - 1
"""The Job's ttlSecondsAfterFinished is an int32: durations that become seconds of a Job field
must fit in it (596523h is the largest whole number of hours that does)."""
MAX_JOB_DURATION = "596523h"
MAX_DIMENSION = 1 << 24
"""The largest tensor or sample dimension (16M): larger ones are a mistake, not a model."""
MAX_BATCH_SIZE = 65536
"""The largest batch size: a batch is allocated whole, so a larger one is refused up front."""
MAX_TARGET_QPS = 1_000_000
"""The largest Server targetQPS: the agent plans every arrival of a measurement window."""
MAX_AXIS = 8
"""Tensors have at most 8 dimensions (TensorSpec.shape), so an axis lies in [-8, 7]."""
INT64 = 2**63 - 1
Dimension = Annotated[StrictInt, Field(le=MAX_DIMENSION)]
Axis = Annotated[StrictInt, Field(ge=-MAX_AXIS, le=MAX_AXIS - 1)]


def _fits_a_job(value: str | None) -> bool:
    return value is None or parse_duration(value) <= MAX_JOB_SECONDS


def _job_seconds_rule(field: str) -> Rule:
    """``field`` (a duration) becomes seconds of a Job field: it must fit in an int32."""
    return Rule(
        cel=f"!has(self.{field}) || duration(self.{field}) <= duration('{MAX_JOB_DURATION}')",
        message=f"must be at most {MAX_JOB_DURATION} (the Job keeps it as 32-bit seconds)",
        field=field,
        check=lambda m: _fits_a_job(getattr(m, re.sub(r"(?<!^)(?=[A-Z])", "_", field).lower())),
    )


PVC_CLAIM = r"^pvc://[a-z0-9]([-a-z0-9.]*[a-z0-9])?(/|$)"
"""A pvc:// URI starts with the claim's name (a DNS subdomain) and a slash."""
PARENT_SEGMENT = r"/[.][.](/|$)"


S3_USERINFO = r"^s3://[^/]*@"
"""userinfo in an s3:// URI: a bucket name holds no ':' or '@', so this is a credential."""


def _s3_credentials_rule(field: str = "uri") -> Rule:
    """An s3:// URI never holds credentials: they belong in ``credentialsSecretRef``."""
    return Rule(
        cel=f"!has(self.{field}) || !self.{field}.matches('{S3_USERINFO}')",
        message="an s3:// URI cannot hold credentials (a bucket name has no ':' or '@'); "
        "write s3://bucket/key and put the keys in a Secret named by "
        "spec.model.credentialsSecretRef",
        field=field,
        check=lambda m: re.search(S3_USERINFO, getattr(m, field) or "") is None,
    )


DATASET_FILE_FIELDS: Final = ("uri", "path", "annotations", "masks", "targets", "tokenizer")
"""The dataset's fields that name a file or folder (each may be a ``pvc://`` URI)."""


def _pvc_rules(field: str = "uri") -> tuple[Rule, ...]:
    """A pvc:// URI names a claim the operator mounts and a path inside it: the claim must be
    a PersistentVolumeClaim name and the path must not climb out of the volume with '..'."""
    unset = f"!has(self.{field}) || !self.{field}.startsWith('pvc://')"

    def is_pvc(m: Any) -> bool:
        uri = getattr(m, field)
        return isinstance(uri, str) and uri.startswith("pvc://")

    return (
        Rule(
            cel=f"{unset} || self.{field}.matches('{PVC_CLAIM}')",
            message="write pvc://<claim>/<path>, where <claim> is a PersistentVolumeClaim name",
            field=field,
            check=lambda m: not is_pvc(m) or re.search(PVC_CLAIM, getattr(m, field)) is not None,
        ),
        Rule(
            cel=f"{unset} || !self.{field}.matches('{PARENT_SEGMENT}')",
            message="a pvc:// path must not contain '..'; give a path inside the claim",
            field=field,
            check=lambda m: not is_pvc(m) or re.search(PARENT_SEGMENT, getattr(m, field)) is None,
        ),
    )


class ModelFormat(StrEnum):
    ONNX = "onnx"
    TORCHSCRIPT = "torchscript"
    TORCH_EXPORT = "torch-export"
    SAVEDMODEL = "savedmodel"


class FrameworkName(StrEnum):
    PYTORCH = "pytorch"
    TENSORFLOW = "tensorflow"
    ONNXRUNTIME = "onnxruntime"


FORMATS_BY_FRAMEWORK: dict[FrameworkName, frozenset[ModelFormat]] = {
    FrameworkName.PYTORCH: frozenset({ModelFormat.TORCHSCRIPT, ModelFormat.TORCH_EXPORT}),
    FrameworkName.TENSORFLOW: frozenset({ModelFormat.SAVEDMODEL}),
    FrameworkName.ONNXRUNTIME: frozenset({ModelFormat.ONNX}),
}
"""Which model formats each framework adapter can load (a semantic check, not a schema rule)."""


class DType(StrEnum):
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT64 = "float64"
    INT64 = "int64"
    INT32 = "int32"
    UINT8 = "uint8"
    BOOL = "bool"


class Layout(StrEnum):
    NCHW = "NCHW"
    NHWC = "NHWC"
    NC = "NC"
    CHW = "CHW"
    HWC = "HWC"


class ScenarioType(StrEnum):
    SINGLE_STREAM = "SingleStream"
    MULTI_STREAM = "MultiStream"
    SERVER = "Server"
    OFFLINE = "Offline"


class ScenarioDriver(StrEnum):
    BUILTIN = "builtin"
    LOADGEN = "loadgen"


class RepetitionProcess(StrEnum):
    SAME = "same"
    FRESH = "fresh"


LOADGEN_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 97.0, 99.0, 99.9)
"""The latency percentiles MLPerf LoadGen reports (its results.cc): the only ones a
``driver: loadgen`` measurement can carry."""
_LOADGEN_CEL = "[" + ", ".join(f"{p:.1f}" for p in LOADGEN_PERCENTILES) + "]"
_LOADGEN_TEXT = ", ".join(f"{p:g}" for p in LOADGEN_PERCENTILES)
_ONLY_LOADGEN = f"driver loadgen reports only the percentiles LoadGen computes: {_LOADGEN_TEXT}"
_NOT_LOADGEN = "!has(self.driver) || self.driver != 'loadgen' || "


def _is_loadgen(m: Any) -> bool:
    return bool(m.driver == ScenarioDriver.LOADGEN)


class Device(StrEnum):
    CPU = "cpu"
    GPU = "gpu"


class TraceLevel(StrEnum):
    NONE = "none"
    MODEL = "model"
    FRAMEWORK = "framework"
    LIBRARY = "library"


class DatasetType(StrEnum):
    DIGITS = "digits"
    SYNTHETIC = "synthetic"
    IMAGEFOLDER = "imagefolder"
    NPZ = "npz"
    MASKS = "masks"
    TEXT = "text"
    COCO = "coco"
    PAIRS = "pairs"


class TaskType(StrEnum):
    CLASSIFICATION = "classification"
    DETECTION = "detection"
    SEGMENTATION = "segmentation"
    TEXT_DETECTION = "text-detection"
    TEXT_CLASSIFICATION = "text-classification"
    IMAGE_TO_IMAGE = "image-to-image"


class ChannelOrder(StrEnum):
    RGB = "RGB"
    BGR = "BGR"


# --------------------------------------------------------------------------------------- model


class TensorSpec(SpecModel):
    """One named model input or output."""

    name: Annotated[str, Field(min_length=1, max_length=253)]
    """Tensor name as the model declares it (ONNX input name, SavedModel signature key, or a
    positional name such as 'input0' for TorchScript)."""

    shape: Annotated[list[Dimension], Field(min_length=1, max_length=8)]
    """Dimensions; -1 marks a dynamic dimension (normally the batch, first), e.g. [-1, 1, 8, 8]."""

    dtype: DType = DType.FLOAT32
    """Element type."""

    layout: Layout | None = None
    """Memory layout of image tensors, e.g. NCHW for PyTorch/ONNX, NHWC for TensorFlow."""

    field: Annotated[str | None, Field(min_length=1, max_length=63)] = None
    """Inputs only: the dataset field that feeds this input. A text dataset has input_ids,
    attention_mask and token_type_ids (default: the input's own name); an image dataset feeds
    its one input with the preprocessed image."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="self.shape.all(d, d == -1 || d > 0)",
            message="dimensions must be positive, or -1 for a dynamic dimension",
            field="shape",
            check=lambda m: all(d == -1 or d > 0 for d in m.shape),
        ),
    )


class SecretReference(SpecModel):
    """A Secret in the evaluation's namespace."""

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=NAME_PATTERN)]
    """Name of the Secret."""


class ModelSource(SpecModel):
    """The model under evaluation and where to fetch it."""

    name: Annotated[str, Field(min_length=1, max_length=63, pattern=NAME_PATTERN)]
    """Model name, used in labels, metrics and reports (lower-case, digits, '-', '_', '.')."""

    version: Annotated[str, Field(max_length=63)] = "1"
    """Model version, recorded with every result."""

    uri: Annotated[str, Field(min_length=1, max_length=2048, pattern=URI_PATTERN)]
    """Where the model lives: file:// or a local path (relative paths resolve against the spec
    file's folder), http(s)://, s3://bucket/key, or pvc://claim/path for a mounted volume.
    Credentials never go here: use credentialsSecretRef."""

    sha256: Annotated[str | None, Field(pattern=SHA256_PATTERN)] = None
    """Expected SHA-256 of the model, as `mlms hash PATH` prints it: of the file; for a
    directory model, of its sorted file listing; for an archive, of the archive or of the folder
    it unpacks to (either is accepted). The agent refuses a model that does not match."""

    format: ModelFormat
    """Serialization format: onnx, torchscript, torch-export (a .pt2 program) or savedmodel."""

    inputs: Annotated[list[TensorSpec], Field(min_length=1, max_length=16)]
    """Model inputs, in order."""

    outputs: Annotated[list[TensorSpec], Field(max_length=16)] = []
    """Model outputs, in order; the first is the one post-processing reads."""

    credentials_secret_ref: SecretReference | None = None
    """Secret holding credentials for the model source (e.g. AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY for s3://), exposed to the evaluation job as environment variables
    and as files; every message of the run has their values replaced by REDACTED."""

    rules: ClassVar[tuple[Rule, ...]] = (*_pvc_rules(), _s3_credentials_rule())


class ModelExport(SpecModel):
    """The same model serialized in another format, for frameworks that cannot load the
    primary one (e.g. a TorchScript file for pytorch next to the ONNX file for onnxruntime)."""

    format: ModelFormat
    """Serialization format of this copy: onnx, torchscript, torch-export or savedmodel."""

    uri: Annotated[str, Field(min_length=1, max_length=2048, pattern=URI_PATTERN)]
    """Where this copy lives (same schemes as model.uri)."""

    sha256: Annotated[str | None, Field(pattern=SHA256_PATTERN)] = None
    """Expected SHA-256 of this copy, as `mlms hash PATH` prints it."""

    rules: ClassVar[tuple[Rule, ...]] = (*_pvc_rules(), _s3_credentials_rule())


EXPORT_RULES: tuple[Rule, ...] = (
    Rule(
        cel="!has(self.exports) || !has(self.model) || "
        "self.exports.all(e, e.format != self.model.format)",
        message="an export repeats model.format; exports are for the other formats",
        field="exports",
        check=lambda m: m.model is None or all(e.format != m.model.format for e in m.exports),
    ),
    Rule(
        cel="!has(self.exports) || self.exports.all(e, "
        "self.exports.exists_one(f, f.format == e.format))",
        message="each format may appear once in exports",
        field="exports",
        check=lambda m: len({e.format for e in m.exports}) == len(m.exports),
    ),
)
"""The rules of an ``exports`` list beside an optional ``model`` (a sweep entry, a Model)."""


class ModelReference(SpecModel):
    """A Model (kind Model, a reusable model manifest) in the same namespace."""

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=OBJECT_NAME_PATTERN)]
    """Name of the Model."""


# ------------------------------------------------------------------------------ processing


class Resize(SpecModel):
    """Resize an image to height x width."""

    height: Annotated[StrictInt, Field(gt=0, le=16384)]
    """Target height in pixels."""
    width: Annotated[StrictInt, Field(gt=0, le=16384)]
    """Target width in pixels."""
    interpolation: Literal["nearest", "bilinear", "bicubic"] = "bilinear"
    """Interpolation filter."""


class CenterCrop(SpecModel):
    """Crop the central height x width region."""

    height: Annotated[StrictInt, Field(gt=0, le=16384)]
    """Crop height in pixels."""
    width: Annotated[StrictInt, Field(gt=0, le=16384)]
    """Crop width in pixels."""


class Decode(SpecModel):
    """Decode an encoded image file (PNG, JPEG) into an HWC uint8 array."""

    mode: Literal["RGB", "L"] = "RGB"
    """Colour mode after decoding: RGB (3 channels) or L (grey, 1 channel)."""
    library: Literal["pillow", "opencv"] | None = None
    """The decoder: pillow (Image.open; also when unset, so specs written before this field
    hash as they did) or opencv (cv2.imdecode, which needs the opencv extra; the EXIF
    orientation is ignored and the image is converted to RGB or L as Pillow does, so only the
    decoding differs)."""


class ToFloat(SpecModel):
    """Convert the array's element type."""

    dtype: DType = DType.FLOAT32
    """Element type after the conversion."""


class Scale(SpecModel):
    """Multiply every element by a constant (e.g. 1/255 for 8-bit images)."""

    factor: Annotated[StrictFloat, Field(gt=0)]
    """The multiplier."""


class Normalize(SpecModel):
    """Per-channel (x - mean) / std, channels last or first as the current layout says."""

    mean: Annotated[list[StrictFloat], Field(min_length=1, max_length=16)]
    """Per-channel mean."""
    std: Annotated[list[StrictFloat], Field(min_length=1, max_length=16)]
    """Per-channel standard deviation (all > 0)."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="size(self.mean) == size(self.std)",
            message="mean and std need the same number of channels",
            field="std",
            check=lambda m: len(m.mean) == len(m.std),
        ),
        Rule(
            cel="self.std.all(s, s > 0.0)",
            message="every std must be > 0",
            field="std",
            check=lambda m: all(s > 0 for s in m.std),
        ),
    )


class LayoutChange(SpecModel):
    """Transpose a sample between layouts, e.g. HWC (images) to CHW (PyTorch/ONNX)."""

    from_: Annotated[Literal["HWC", "CHW"], Field(alias="from")]
    """Layout of the sample before the step."""
    to: Literal["HWC", "CHW"]
    """Layout of the sample after the step."""


class ChannelOrderChange(SpecModel):
    """Reorder colour channels of an HWC/CHW sample (decoded images are RGB)."""

    order: ChannelOrder
    """Channel order the model expects."""


class PreprocessStep(SpecModel):
    """One preprocessing step; set exactly one member. Steps run per sample, in order."""

    decode: Decode | None = None
    """Decode an image file."""
    resize: Resize | None = None
    """Resize the image."""
    center_crop: CenterCrop | None = None
    """Crop the centre."""
    to_float: ToFloat | None = None
    """Convert the element type."""
    scale: Scale | None = None
    """Multiply by a constant."""
    normalize: Normalize | None = None
    """Subtract mean, divide by std per channel."""
    layout: LayoutChange | None = None
    """Transpose between HWC and CHW."""
    channel_order: ChannelOrderChange | None = None
    """Reorder colour channels (RGB/BGR)."""

    rules: ClassVar[tuple[Rule, ...]] = (
        exactly_one_of(
            "decode", "resize", "centerCrop", "toFloat", "scale", "normalize", "layout",
            "channelOrder",
        ),
    )  # fmt: skip

    @property
    def op(self) -> str:
        """The camelCase name of the member that is set."""
        for name, field in type(self).model_fields.items():
            if getattr(self, name) is not None:
                return field.alias or name
        raise AssertionError("validated step has no member set")


class Softmax(SpecModel):
    """Turn logits into probabilities along the last axis."""

    axis: Axis = -1
    """Axis to normalize over."""


class TopK(SpecModel):
    """Keep the k best classes per sample."""

    k: Annotated[StrictInt, Field(gt=0, le=1000)] = 5
    """How many classes to keep."""


class Argmax(SpecModel):
    """Reduce each sample to its best class index."""

    axis: Axis = -1
    """Axis to reduce."""


class Labels(SpecModel):
    """Map class indices to names in reports."""

    names: Annotated[list[str], Field(max_length=100000)] = []
    """Class names, index order."""
    uri: Annotated[str | None, Field(max_length=2048)] = None
    """A text file with one class name per line, instead of names."""

    rules: ClassVar[tuple[Rule, ...]] = (_s3_credentials_rule(),)


class PostprocessStep(SpecModel):
    """One postprocessing step; set exactly one member. Steps run on the batch output, in order."""

    softmax: Softmax | None = None
    """Softmax over classes."""
    topk: TopK | None = None
    """Top-k classes."""
    argmax: Argmax | None = None
    """Best class."""
    labels: Labels | None = None
    """Class names."""

    rules: ClassVar[tuple[Rule, ...]] = (exactly_one_of("softmax", "topk", "argmax", "labels"),)

    @property
    def op(self) -> str:
        """The name of the member that is set."""
        for name in type(self).model_fields:
            if getattr(self, name) is not None:
                return name
        raise AssertionError("validated step has no member set")


# ------------------------------------------------------------------------------- framework


class Framework(SpecModel):
    """The framework that runs the model, and how it is configured."""

    name: FrameworkName
    """pytorch, tensorflow or onnxruntime."""

    version: Annotated[str | None, Field(max_length=64)] = None
    """A PEP 440 version constraint the installed framework must satisfy, e.g. '>=2.4,<3'."""

    image: Annotated[str | None, Field(max_length=512)] = None
    """Container image for the evaluation job, overriding the operator's per-framework default."""

    execution_provider: (
        Literal["CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"] | None
    ) = None
    """ONNX Runtime execution provider; default follows hardware.device (CUDA on gpu)."""

    intra_op_threads: Annotated[StrictInt | None, Field(ge=0, le=1024)] = None
    """Threads inside one operator (0 or unset: the framework's default)."""

    inter_op_threads: Annotated[StrictInt | None, Field(ge=0, le=1024)] = None
    """Threads across independent operators (0 or unset: the framework's default)."""

    graph_optimization_level: Literal["disable", "basic", "extended", "all"] | None = None
    """ONNX Runtime graph optimization level (default: all)."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="!has(self.executionProvider) || self.name == 'onnxruntime'",
            message="executionProvider applies only to framework onnxruntime; remove it",
            field="executionProvider",
            check=lambda m: m.execution_provider is None or m.name == FrameworkName.ONNXRUNTIME,
        ),
        Rule(
            cel="!has(self.graphOptimizationLevel) || self.name == 'onnxruntime'",
            message="graphOptimizationLevel applies only to framework onnxruntime; remove it",
            field="graphOptimizationLevel",
            check=lambda m: (
                m.graph_optimization_level is None or m.name == FrameworkName.ONNXRUNTIME
            ),
        ),
    )


# --------------------------------------------------------------------------------- dataset


class Dataset(SpecModel):
    """The data the model is evaluated on."""

    type: DatasetType
    """digits (scikit-learn's bundled 8x8 digits, real labels), synthetic (seeded random
    tensors, performance only), imagefolder (class sub-folders of images), npz (arrays+labels),
    masks (images and PNG masks of the same name, VOC style), text (.jsonl, .csv or .parquet
    rows of a text and a label, through a tokenizer), coco (an image folder and a COCO
    instances JSON), pairs (input images and target images of the same name, for
    image-to-image)."""

    shape: Annotated[list[Dimension] | None, Field(min_length=1, max_length=8)] = None
    """synthetic: shape of one sample, without the batch dimension, e.g. [3, 224, 224]."""

    dtype: DType = DType.FLOAT32
    """synthetic: element type of the generated samples."""

    layout: Literal["HWC", "CHW"] = "HWC"
    """Layout of each raw sample: HWC (images, digits) or CHW (channels-first arrays from
    synthetic or npz); preprocessing steps find the channel axis from it."""

    path: Annotated[str | None, Field(max_length=2048)] = None
    """imagefolder: folder with one sub-folder of images per class (sorted names = classes);
    masks and coco: the folder of images; pairs: the folder of input images; text: the
    .jsonl, .csv or .parquet file (Parquet through pyarrow, the parquet extra)."""

    uri: Annotated[str | None, Field(max_length=2048, pattern=URI_PATTERN)] = None
    """npz: an .npz file holding 'x' (samples) and optionally 'y' (integer labels)."""

    annotations: Annotated[str | None, Field(max_length=2048)] = None
    """coco: the COCO instances JSON (images, annotations, categories); its images' file_name
    entries are relative to path."""

    masks: Annotated[str | None, Field(max_length=2048)] = None
    """masks: the folder of PNG masks, one per image with the image's name, holding a class
    index per pixel (mode L or a palette)."""

    targets: Annotated[str | None, Field(max_length=2048)] = None
    """pairs: the folder of target images, one per input image with the same file name, all
    scaled from their inputs by one factor (1 for restoration, 2 or 4 for super-resolution)."""

    tokenizer: Annotated[str | None, Field(max_length=2048)] = None
    """text: a Hugging Face tokenizer.json (the tokenizers library) that turns each text into
    input_ids, attention_mask and token_type_ids."""

    max_length: Annotated[StrictInt, Field(gt=0, le=8192)] = 128
    """text: tokens per sample; longer texts are truncated, shorter ones padded."""

    text_field: Annotated[str, Field(min_length=1, max_length=253)] = "text"
    """text: the field (JSONL key, CSV or Parquet column) holding the text."""

    label_field: Annotated[str, Field(min_length=1, max_length=253)] = "label"
    """text: the field holding the label (integers, or strings numbered in sorted order)."""

    skip_missing: StrictBool = False
    """masks, pairs and coco: leave out an image whose mask or target (or, for coco, the image
    itself) is missing and count it (the result's task.skipped) instead of failing the run."""

    split: Literal["train", "test", "all"] = "test"
    """Which split to use: digits has a fixed, seeded 80/20 train/test split; other types 'all'."""

    limit: Annotated[StrictInt | None, Field(gt=0, le=2**31 - 1)] = None
    """Use only the first N samples (after the deterministic ordering)."""

    size: Annotated[StrictInt, Field(gt=0, le=10_000_000)] = 1024
    """synthetic: how many samples to generate."""

    rules: ClassVar[tuple[Rule, ...]] = (
        *(rule for name in DATASET_FILE_FIELDS for rule in _pvc_rules(name)),
        _s3_credentials_rule(),
        Rule(
            cel="self.type != 'synthetic' || has(self.shape)",
            message="required when type is synthetic: the shape of one sample, e.g. [3, 224, 224]",
            field="shape",
            check=lambda m: m.type != DatasetType.SYNTHETIC or m.shape is not None,
            reason="FieldValueRequired",
        ),
        Rule(
            cel="!(self.type in ['imagefolder', 'masks', 'pairs', 'text', 'coco']) "
            "|| has(self.path)",
            message="required when type is imagefolder (a folder with one sub-folder per "
            "class), masks, pairs or coco (the folder of images) or text (the .jsonl, .csv "
            "or .parquet file)",
            field="path",
            check=lambda m: (
                m.type
                not in (
                    DatasetType.IMAGEFOLDER,
                    DatasetType.MASKS,
                    DatasetType.PAIRS,
                    DatasetType.TEXT,
                    DatasetType.COCO,
                )
                or m.path is not None
            ),
            reason="FieldValueRequired",
        ),
        Rule(
            cel="self.type != 'npz' || has(self.uri)",
            message="required when type is npz: the location of the .npz file",
            field="uri",
            check=lambda m: m.type != DatasetType.NPZ or m.uri is not None,
            reason="FieldValueRequired",
        ),
        Rule(
            cel="self.type != 'coco' || has(self.annotations)",
            message="required when type is coco: the COCO instances JSON (images, "
            "annotations, categories)",
            field="annotations",
            check=lambda m: m.type != DatasetType.COCO or m.annotations is not None,
            reason="FieldValueRequired",
        ),
        Rule(
            cel="self.type != 'masks' || has(self.masks)",
            message="required when type is masks: the folder of PNG masks named like the images",
            field="masks",
            check=lambda m: m.type != DatasetType.MASKS or m.masks is not None,
            reason="FieldValueRequired",
        ),
        Rule(
            cel="self.type != 'pairs' || has(self.targets)",
            message="required when type is pairs: the folder of target images named like the "
            "inputs",
            field="targets",
            check=lambda m: m.type != DatasetType.PAIRS or m.targets is not None,
            reason="FieldValueRequired",
        ),
        Rule(
            cel="self.type != 'text' || has(self.tokenizer)",
            message="required when type is text: a tokenizer.json (Hugging Face tokenizers)",
            field="tokenizer",
            check=lambda m: m.type != DatasetType.TEXT or m.tokenizer is not None,
            reason="FieldValueRequired",
        ),
        Rule(
            cel="!has(self.shape) || self.shape.all(d, d > 0)",
            message="every dimension must be > 0",
            field="shape",
            check=lambda m: m.shape is None or all(d > 0 for d in m.shape),
        ),
    )


class Detection(SpecModel):
    """How a detector's outputs read as boxes, when its graph leaves postprocessing out."""

    boxes: Annotated[str, Field(min_length=1, max_length=253)] = "boxes"
    """The output of boxes [batch, detections, 4]."""

    scores: Annotated[str, Field(min_length=1, max_length=253)] = "scores"
    """The output of scores [batch, detections]."""

    classes: Annotated[str, Field(min_length=1, max_length=253)] = "classes"
    """The output of class ids [batch, detections] (integers, or floats holding them)."""

    box_format: Literal["xyxy", "xywh", "cxcywh"] = "xyxy"
    """How a box's four numbers read: corners, corner and size, or centre and size."""

    normalized: StrictBool = False
    """Boxes are fractions of the model input's width and height, not its pixels."""

    score_threshold: Annotated[StrictFloat, Field(ge=0, le=1)] = 0.05
    """Detections scoring less are dropped."""

    nms_iou: Annotated[StrictFloat | None, Field(gt=0, le=1)] = None
    """Class-wise non-maximum suppression at this IoU; null when the graph already does it."""

    max_detections: Annotated[StrictInt, Field(gt=0, le=1000)] = 100
    """At most this many detections per image, best first (COCO scores at most 100)."""

    category_ids: Annotated[list[StrictInt], Field(max_length=10000)] = []
    """The COCO category id of each model class id (index = class id); empty: the class ids
    are the category ids."""


class TextDetection(SpecModel):
    """DB (Differentiable Binarization) postprocessing of a text detector's probability map
    [batch, 1, H, W], as PaddleOCR and rapidocr apply it, and the IoU a box must reach."""

    thresh: Annotated[StrictFloat, Field(ge=0, le=1)] = 0.3
    """Pixels above this probability are text."""

    box_thresh: Annotated[StrictFloat, Field(ge=0, le=1)] = 0.5
    """A region's mean probability must reach this to be a box."""

    unclip_ratio: Annotated[StrictFloat, Field(gt=0, le=10)] = 1.6
    """Each region grows on every side by area x unclipRatio / perimeter."""

    iou_threshold: Annotated[StrictFloat, Field(gt=0, le=1)] = 0.5
    """A detected box matches a true one at this IoU or more (one to one, best first)."""


CROP_BORDER_FIX: Final = (
    f"must be a number of pixels from 0 to {MAX_DIMENSION}, or 'scale' (the pairs dataset's "
    "scale factor)"
)


def _crop_border(value: Any) -> Any:
    """A whole number of pixels in range, or 'scale'; anything else (a float, a bool, a
    numeric string) is refused with one message rather than one per union member."""
    if value == "scale" or (type(value) is int and 0 <= value <= MAX_DIMENSION):
        return value
    raise ValueError(CROP_BORDER_FIX)


CropBorder = Annotated[
    int | Literal["scale"],
    BeforeValidator(_crop_border),
    Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
]
"""Pixels cut from every border, or 'scale'; an int-or-string in the CRD, so a CEL rule
holds it to the same values there."""


class Task(SpecModel):
    """What the model does, so the accuracy pass computes that task's metrics."""

    type: TaskType = TaskType.CLASSIFICATION
    """classification (top-1 / top-5 from class scores, as without a task), detection (COCO
    box mAP@[.5:.95], AP50, AP75 by pycocotools, against a coco dataset), text-detection
    (precision, recall and h-mean of DB boxes from a probability map, against a coco
    dataset's word boxes), segmentation
    (mIoU and pixel accuracy from per-pixel class scores [N, classes, H, W] or class ids
    [N, H, W], against a masks dataset), text-classification (accuracy and macro-F1 by
    scikit-learn, against a text dataset's labels), image-to-image (mean PSNR in dB and SSIM
    per image by scikit-image, of output images against a pairs dataset's targets)."""

    output: Annotated[str | None, Field(min_length=1, max_length=253)] = None
    """The model output the metrics read, by name (one of spec.model.outputs); default: the
    first output."""

    num_classes: Annotated[StrictInt | None, Field(gt=0, le=100_000)] = None
    """segmentation: required, the number of classes (mask values 0..numClasses-1);
    text-classification: the classes macro-F1 averages over (default: those seen)."""

    ignore_index: Annotated[StrictInt, Field(ge=0, le=65535)] = 255
    """segmentation: the mask value of pixels that are not scored (VOC's 255 border)."""

    data_range: Annotated[StrictFloat, Field(gt=0, le=65535)] = 1.0
    """image-to-image: the range of the output's values, 0..dataRange (1.0 for floats, 255
    for 8-bit values); 8-bit targets are scaled to it and outputs clipped to it."""

    crop_border: CropBorder = 0
    """image-to-image: pixels cut from every border of each output and its target before
    PSNR and SSIM, as super-resolution papers cut the scale factor; or 'scale', the pairs
    dataset's scale factor (target size over input size; a whole number)."""

    channels: Literal["rgb", "y"] = "rgb"
    """image-to-image: what PSNR and SSIM compare: rgb, every channel as it is (a grey image
    its one); y, the luma of ITU-R BT.601 YCbCr (scikit-image's rgb2ycbcr, as MATLAB's
    rgb2ycbcr), as super-resolution papers report; y needs outputs of three channels."""

    detection: Detection = Detection()
    """detection: which outputs hold the boxes, scores and classes, and how to read them."""

    text_detection: TextDetection = TextDetection()
    """text-detection: how the probability map becomes boxes, and the IoU they must reach."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="!has(self.type) || self.type != 'segmentation' || has(self.numClasses)",
            message="required when type is segmentation: the number of classes",
            field="numClasses",
            check=lambda m: m.type != TaskType.SEGMENTATION or m.num_classes is not None,
            reason="FieldValueRequired",
        ),
        Rule(
            cel="!has(self.cropBorder) || (type(self.cropBorder) == int ? "
            f"self.cropBorder >= 0 && self.cropBorder <= {MAX_DIMENSION} : "
            "self.cropBorder == 'scale')",
            message=CROP_BORDER_FIX,
            field="cropBorder",
            check=lambda m: m.crop_border == "scale" or 0 <= m.crop_border <= MAX_DIMENSION,
        ),
    )


# -------------------------------------------------------------------------------- scenario


class Stability(SpecModel):
    """When a measurement counts as stable (perf_analyzer's rule): p50 of consecutive
    measurement windows moves less than tolerancePercent."""

    tolerance_percent: Annotated[StrictFloat, Field(gt=0, le=100)] = 10.0
    """Largest allowed change of p50 between consecutive windows, in percent."""

    max_windows: Annotated[StrictInt, Field(ge=2, le=100)] = 5
    """Give up (verdict INVALID: unstable) after this many windows."""


TargetQPS = Annotated[
    StrictFloat | Literal["auto"],
    Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
]


class Scenario(SpecModel):
    """How queries are issued, following MLPerf LoadGen's scenarios."""

    type: ScenarioType = ScenarioType.SINGLE_STREAM
    """SingleStream (one query at a time, latency), MultiStream (samplesPerQuery samples per
    query), Server (Poisson arrivals at targetQPS, latency under load), Offline (throughput)."""

    batch_sizes: Annotated[
        list[Annotated[StrictInt, Field(le=MAX_BATCH_SIZE)]], Field(min_length=1, max_length=32)
    ] = [1]
    """Batch sizes to measure, each a separate run; unique, > 0 and at most 65536."""

    warmup: Annotated[StrictInt, Field(ge=0, le=100000)] = 10
    """Queries run before measuring, per batch size; excluded from results and reported."""

    min_query_count: Annotated[StrictInt, Field(ge=1, le=100_000_000)] = 100
    """A measurement needs at least this many queries to be VALID."""

    min_duration: Duration = "1s"
    """A measurement needs to last at least this long to be VALID, e.g. '10s'."""

    samples_per_query: Annotated[StrictInt, Field(ge=1, le=4096)] = 8
    """MultiStream: samples in each query."""

    target_qps: TargetQPS | None = Field(default=None, alias="targetQPS")
    """Server: queries per second to offer (Poisson arrivals, at most 1000000), or 'auto' to
    search the peak QPS that still meets latencyBound (LoadGen's FindPeakPerformance)."""

    latency_bound: Duration = "100ms"
    """Server: the latency that latencyBoundPercentile of queries must meet for a VALID run."""

    latency_bound_percentile: Annotated[StrictFloat, Field(gt=0, lt=100)] = 99.0
    """Server: the percentile held to latencyBound."""

    latency_percentiles: Annotated[list[StrictFloat], Field(min_length=1, max_length=16)] = [
        50.0,
        90.0,
        95.0,
        99.0,
        99.9,
    ]
    """Latency percentiles to report (from the full distribution)."""

    repetitions: Annotated[StrictInt, Field(ge=1, le=100)] = 1
    """Repetitions of each batch size's timed phase (repetitionProcess says in which
    process); all are kept, the median one summarized, and with 2 or more each headline
    figure gets a bootstrap interval over them (measurements[].spread)."""

    repetition_process: RepetitionProcess | None = None
    """same (also when unset, so specs written before this field hash as they did): the
    repetitions run one after another in the agent's process, after one warm-up. fresh: each
    repetition runs in a new process that imports the framework, loads the model and warms
    up before it (not timed), so the interval also covers start-up state; needs repetitions
    2 or more and driver builtin."""

    seed: Annotated[StrictInt, Field(ge=0, le=2**31 - 1)] = 0
    """Seed for sample order, synthetic data and Server arrivals."""

    accuracy: StrictBool = True
    """Run a separate accuracy pass over the whole dataset (needs labels)."""

    stability: Stability = Stability()
    """When a latency measurement counts as stable (driver builtin; LoadGen runs one window
    and decides validity itself)."""

    driver: ScenarioDriver = ScenarioDriver.BUILTIN
    """Who issues the queries: builtin (the agent's own load generator) or loadgen (MLPerf
    LoadGen, `pip install 'mlmodelscope[loadgen]'`: the same system under test and batches,
    LoadGen's latencies, validity and log files)."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel=_NOT_LOADGEN + "!has(self.targetQPS) || type(self.targetQPS) == int || "
            "self.targetQPS != 'auto'",
            message="'auto' (the peak-QPS search) needs driver builtin; "
            "driver loadgen needs a number",
            field="targetQPS",
            check=lambda m: not _is_loadgen(m) or m.target_qps != "auto",
        ),
        Rule(
            cel=_NOT_LOADGEN + "!has(self.repetitions) || self.repetitions == 1",
            message="driver loadgen runs one LoadGen test per batch size: set repetitions 1",
            field="repetitions",
            check=lambda m: not _is_loadgen(m) or m.repetitions == 1,
        ),
        Rule(
            cel=_NOT_LOADGEN + "!has(self.repetitionProcess) || self.repetitionProcess != 'fresh'",
            message="driver loadgen runs in the agent's process: remove repetitionProcess "
            "or set driver builtin",
            field="repetitionProcess",
            check=lambda m: not _is_loadgen(m) or m.repetition_process != RepetitionProcess.FRESH,
        ),
        Rule(
            cel="!has(self.repetitionProcess) || self.repetitionProcess != 'fresh' || "
            "(has(self.repetitions) && self.repetitions >= 2)",
            message="fresh starts a new process per repetition: set repetitions 2 or more, "
            "or remove repetitionProcess",
            field="repetitionProcess",
            check=lambda m: m.repetition_process != RepetitionProcess.FRESH or m.repetitions >= 2,
        ),
        Rule(
            cel=_NOT_LOADGEN + "!has(self.latencyPercentiles) || "
            f"self.latencyPercentiles.all(p, p in {_LOADGEN_CEL})",
            message=_ONLY_LOADGEN,
            field="latencyPercentiles",
            check=lambda m: (
                not _is_loadgen(m) or all(p in LOADGEN_PERCENTILES for p in m.latency_percentiles)
            ),
        ),
        Rule(
            cel=_NOT_LOADGEN + "!has(self.type) || self.type != 'Server' || "
            f"!has(self.latencyBoundPercentile) || self.latencyBoundPercentile in {_LOADGEN_CEL}",
            message=_ONLY_LOADGEN,
            field="latencyBoundPercentile",
            check=lambda m: (
                not _is_loadgen(m)
                or m.type != ScenarioType.SERVER
                or m.latency_bound_percentile in LOADGEN_PERCENTILES
            ),
        ),
        Rule(
            cel=_NOT_LOADGEN + "!has(self.type) || self.type != 'MultiStream' || "
            "!has(self.batchSizes) || !has(self.samplesPerQuery) || "
            "self.batchSizes.all(b, self.samplesPerQuery % b == 0)",
            message="driver loadgen issues a MultiStream query as whole batches: every batch "
            "size must divide samplesPerQuery",
            field="batchSizes",
            check=lambda m: (
                not _is_loadgen(m)
                or m.type != ScenarioType.MULTI_STREAM
                or all(m.samples_per_query % b == 0 for b in m.batch_sizes if b > 0)
            ),
        ),
        Rule(
            cel="!has(self.type) || self.type != 'Server' || has(self.targetQPS)",
            message="required when type is Server: queries per second to offer, or 'auto'",
            field="targetQPS",
            check=lambda m: m.type != ScenarioType.SERVER or m.target_qps is not None,
            reason="FieldValueRequired",
        ),
        Rule(
            cel="!has(self.targetQPS) || (has(self.type) && self.type == 'Server')",
            message="applies only to scenario type Server; remove it or set type: Server",
            field="targetQPS",
            check=lambda m: m.target_qps is None or m.type == ScenarioType.SERVER,
        ),
        Rule(
            cel="!has(self.targetQPS) || (type(self.targetQPS) == int ? self.targetQPS > 0 : "
            "(self.targetQPS == 'auto' || double(self.targetQPS) > 0.0))",
            message="must be a number > 0 or 'auto'",
            field="targetQPS",
            check=lambda m: m.target_qps is None or m.target_qps == "auto" or m.target_qps > 0,
        ),
        Rule(
            cel="!has(self.targetQPS) || (type(self.targetQPS) == int ? "
            f"self.targetQPS <= {MAX_TARGET_QPS} : (self.targetQPS == 'auto' || "
            f"double(self.targetQPS) <= {MAX_TARGET_QPS}.0))",
            message=f"must be at most {MAX_TARGET_QPS} queries per second",
            field="targetQPS",
            check=lambda m: (
                m.target_qps is None or m.target_qps == "auto" or m.target_qps <= MAX_TARGET_QPS
            ),
        ),
        Rule(
            cel="!has(self.batchSizes) || self.batchSizes.all(b, b > 0)",
            message="every batch size must be > 0",
            field="batchSizes",
            check=lambda m: all(b > 0 for b in m.batch_sizes),
        ),
        Rule(
            cel="!has(self.batchSizes) || "
            "self.batchSizes.all(b, self.batchSizes.exists_one(c, c == b))",
            message="batch sizes must be unique",
            field="batchSizes",
            check=lambda m: len(set(m.batch_sizes)) == len(m.batch_sizes),
        ),
        Rule(
            cel="!has(self.latencyPercentiles) || "
            "self.latencyPercentiles.all(p, p > 0.0 && p < 100.0)",
            message="percentiles must be between 0 and 100 (exclusive)",
            field="latencyPercentiles",
            check=lambda m: all(0 < p < 100 for p in m.latency_percentiles),
        ),
    )

    @field_validator("target_qps", mode="before")
    @classmethod
    def _qps_from_string(cls, value: Any) -> Any:
        """Accept '12.5' as well as 12.5: the CRD stores fractional QPS as a string."""
        if isinstance(value, str) and value != "auto":
            try:
                return float(value)
            except ValueError:
                raise ValueError("must be a number > 0 or 'auto'") from None
        return value


# -------------------------------------------------------------------------------- hardware


class Toleration(SpecModel):
    """A Kubernetes toleration (same fields as core/v1 Toleration)."""

    key: Annotated[str | None, Field(max_length=MAX_LABEL_KEY)] = None
    """Taint key, a label key such as nvidia.com/gpu; empty (only with operator Exists)
    matches every taint."""
    operator: Literal["Exists", "Equal"] = "Equal"
    """Exists or Equal."""
    value: LabelValue | None = None
    """Taint value for operator Equal (a label value)."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; empty matches all."""
    toleration_seconds: Annotated[StrictInt | None, Field(ge=-INT64 - 1, le=INT64)] = None
    """For NoExecute: how long the pod stays bound after the taint appears."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel=f"!has(self.key) || self.key == '' || ({label_key_cel('self.key')})",
            message=f"must be a label key: {LABEL_KEY_FIX}",
            field="key",
            check=lambda m: not m.key or is_label_key(m.key),
        ),
        Rule(
            cel="(has(self.key) && self.key != '') || "
            "(has(self.operator) && self.operator == 'Exists')",
            message="required unless operator is Exists (an empty key with operator Exists "
            "tolerates every taint)",
            field="key",
            check=lambda m: bool(m.key) or m.operator == "Exists",
            reason="FieldValueRequired",
        ),
        Rule(
            cel="!has(self.value) || self.value == '' || "
            "!has(self.operator) || self.operator != 'Exists'",
            message="a toleration with operator Exists matches any value: leave value empty",
            field="value",
            check=lambda m: not m.value or m.operator != "Exists",
        ),
        Rule(
            cel="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
            message="applies only to effect NoExecute (the API server refuses it otherwise)",
            field="tolerationSeconds",
            check=lambda m: m.toleration_seconds is None or m.effect == "NoExecute",
        ),
    )


def _quantity(value: int | str) -> int | str:
    if isinstance(value, bool) or (isinstance(value, int) and value < 0):
        raise ValueError("must be a non-negative quantity, e.g. '500m', '4Gi'")
    if isinstance(value, str) and not re.match(QUANTITY_PATTERN, value):
        raise ValueError(
            f"{quoted(value)} is not a Kubernetes quantity; write e.g. '500m', '2', '512Mi', '4Gi'"
        )
    return value


Quantity = Annotated[
    int | str,
    AfterValidator(_quantity),
    Field(json_schema_extra={"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN}),
]


class ResourceList(SpecModel):
    """CPU, memory and ephemeral storage quantities (Kubernetes quantity syntax)."""

    cpu: Quantity | None = None
    """CPU, e.g. '2' or '500m'."""
    memory: Quantity | None = None
    """Memory, e.g. '4Gi'."""
    ephemeral_storage: Quantity | None = None
    """Scratch disk, e.g. '10Gi' (the model cache lives there)."""


class Resources(SpecModel):
    """Requests and limits for the evaluation container (GPUs go in hardware.gpus)."""

    requests: ResourceList = ResourceList()
    """Guaranteed resources the scheduler reserves."""
    limits: ResourceList = ResourceList()
    """Upper bounds; set limits equal to requests for Guaranteed QoS and steadier timings."""


NODE_SELECTOR_KEYS: Final = label_keys_rule("nodeSelector", "node_selector")
"""Every nodeSelector key is a label key (a sweep's template hardware checks it too)."""


class Hardware(SpecModel):
    """Where the evaluation runs."""

    device: Device = Device.CPU
    """cpu or gpu."""

    gpus: Annotated[StrictInt, Field(ge=0, le=64)] = 0
    """Number of GPUs (nvidia.com/gpu) for device gpu; 0 means 1 when device is gpu."""

    gpu_product: Annotated[
        str | None, Field(max_length=63, pattern=LABEL_VALUE_PATTERN, min_length=1)
    ] = None
    """GPU model as GPU Feature Discovery labels it (nvidia.com/gpu.product), e.g.
    NVIDIA-A100-SXM4-80GB; the job is pinned to nodes with that label."""

    node_selector: Annotated[dict[str, LabelValue], Field(max_length=64)] = {}
    """Extra node labels the evaluation pod requires: label keys (e.g. mlmodelscope.io/pool)
    and label values."""

    tolerations: Annotated[list[Toleration], Field(max_length=32)] = []
    """Extra tolerations (the nvidia.com/gpu taint is tolerated automatically for gpu)."""

    resources: Resources = Resources()
    """CPU and memory requests and limits."""

    runtime_class_name: Annotated[str | None, Field(max_length=253)] = None
    """RuntimeClass for the pod, e.g. 'nvidia' where the NVIDIA runtime is not the default."""

    rules: ClassVar[tuple[Rule, ...]] = (
        NODE_SELECTOR_KEYS,
        Rule(
            cel="!has(self.gpus) || self.gpus == 0 || (has(self.device) && self.device == 'gpu')",
            message="gpus > 0 needs device: gpu",
            field="gpus",
            check=lambda m: m.gpus == 0 or m.device == Device.GPU,
        ),
        Rule(
            cel="!has(self.gpuProduct) || (has(self.device) && self.device == 'gpu')",
            message="gpuProduct needs device: gpu",
            field="gpuProduct",
            check=lambda m: m.gpu_product is None or m.device == Device.GPU,
        ),
    )

    @property
    def gpu_count(self) -> int:
        """GPUs the job asks for: at least one for device gpu."""
        return max(self.gpus, 1) if self.device == Device.GPU else 0


# --------------------------------------------------------------------------------- tracing


class Tracing(SpecModel):
    """Across-stack tracing (the XSP idea): each level adds detail below the previous one."""

    level: TraceLevel = TraceLevel.MODEL
    """none; model (evaluation, scenario, queries, pre/predict/post); framework (+ operator or
    layer spans from the framework's profiler); library (+ GPU kernels and copies)."""

    sampling: Annotated[StrictFloat, Field(ge=0, le=1)] = 1.0
    """Fraction of queries traced at model level and below (evaluation and scenario spans are
    always kept)."""


# ------------------------------------------------------------------------------------ spec


class EvaluationSpec(SpecModel):
    """What to evaluate: a model, with a framework, on a dataset, under a scenario."""

    model: ModelSource
    """The model and where to fetch it."""

    preprocessing: Annotated[list[PreprocessStep], Field(max_length=32)] = []
    """Per-sample steps from dataset sample to model input, in order."""

    postprocessing: Annotated[list[PostprocessStep], Field(max_length=16)] = []
    """Steps from model output to predictions, in order (accuracy reads the scores)."""

    framework: Framework
    """The framework that runs the model."""

    dataset: Dataset
    """The evaluation data."""

    task: Task = Task()
    """What the model does, and so which metrics the accuracy pass computes."""

    scenario: Scenario = Scenario()
    """How queries are issued and measured."""

    hardware: Hardware = Hardware()
    """Where it runs."""

    tracing: Tracing = Tracing()
    """Across-stack tracing."""

    timeout: Duration = "1h"
    """Wall-clock limit of the evaluation job (activeDeadlineSeconds)."""

    retries: Annotated[StrictInt, Field(ge=0, le=10)] = 0
    """Times a failed evaluation pod is retried (the Job's backoffLimit)."""

    ttl_after_finished: Duration | None = None
    """Delete the finished Job (not the results) after this long, e.g. '24h'."""

    rules: ClassVar[tuple[Rule, ...]] = (
        _job_seconds_rule("timeout"),
        _job_seconds_rule("ttlAfterFinished"),
        Rule(
            cel="(has(self.task) && has(self.task.type) && self.task.type == 'segmentation') == "
            "(self.dataset.type == 'masks')",
            message="a segmentation task needs a masks dataset, and a masks dataset a "
            "segmentation task (task.type: segmentation)",
            field="task",
            check=lambda m: (
                (m.task.type == TaskType.SEGMENTATION) == (m.dataset.type == DatasetType.MASKS)
            ),
        ),
        Rule(
            cel="(has(self.task) && has(self.task.type) && "
            "self.task.type in ['detection', 'text-detection']) == (self.dataset.type == 'coco')",
            message="a detection or text-detection task needs a coco dataset, and a coco "
            "dataset one of them (task.type: detection or text-detection)",
            field="task",
            check=lambda m: (
                (m.task.type in (TaskType.DETECTION, TaskType.TEXT_DETECTION))
                == (m.dataset.type == DatasetType.COCO)
            ),
        ),
        Rule(
            cel="(has(self.task) && has(self.task.type) && self.task.type == 'image-to-image') "
            "== (self.dataset.type == 'pairs')",
            message="an image-to-image task needs a pairs dataset, and a pairs dataset an "
            "image-to-image task (task.type: image-to-image)",
            field="task",
            check=lambda m: (
                (m.task.type == TaskType.IMAGE_TO_IMAGE) == (m.dataset.type == DatasetType.PAIRS)
            ),
        ),
        Rule(
            cel="!has(self.task) || !has(self.task.type) || "
            "self.task.type != 'text-classification' || "
            "self.dataset.type == 'text'",
            message="a text-classification task needs a text dataset (dataset.type: text)",
            field="task",
            check=lambda m: (
                m.task.type != TaskType.TEXT_CLASSIFICATION or m.dataset.type == DatasetType.TEXT
            ),
        ),
    )


class EvaluationResourceSpec(EvaluationSpec):
    """What to evaluate, as written in a ModelEvaluation: the model inline (model) or a
    reusable Model manifest (modelRef). The operator, ``mlms run`` and ``mlms validate``
    resolve modelRef into an :class:`EvaluationSpec` before anything runs."""

    model: ModelSource | None = None  # type: ignore[assignment]
    """The model and where to fetch it; or name a Model with modelRef instead."""

    model_ref: ModelReference | None = None
    """A Model in the same namespace whose model, exports, preprocessing and postprocessing
    this evaluation uses; the evaluation's own preprocessing or postprocessing, when set,
    replaces the Model's. Resolved once, when the evaluation starts: the run records the
    manifest and its resourceVersion, so editing the Model later changes no past result."""

    rules: ClassVar[tuple[Rule, ...]] = (
        exactly_one_of("model", "modelRef"),
        *EvaluationSpec.rules,
    )
