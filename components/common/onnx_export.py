"""
Exporting a sentence-transformers model folder to ONNX, once per model content, into a local cache.

The export is the only step of the ONNX backend that needs torch: it runs in a child process
(`python -m components.common.onnx_export MODEL_DIR`), so the process that embeds never imports
torch and never holds the export's memory. The cache folder of a model is named by a hash of the
model folder's content: a model changed in place (a fine-tuned one saved again) gets a new export,
two copies of the same model share one. A small note keyed by the files' sizes and mtimes maps a
folder to its content hash, so a warm lookup reads a few stats instead of hashing the weights.

Each export folder holds `model.onnx` (the transformer, outputs the token embeddings),
`tokenizer.json` (the model's fast tokenizer) and `encoder.json` (the pooling, normalization and
sequence length the model folder's sentence-transformers config sets); `model_int8.onnx` is added
on demand (dynamic int8 quantization of the same graph). See docs/embedding-backends.md.
"""

import argparse
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from components.common.model_folder import ADAPT_RECORD, DESCRIPTION_FILES
from components.errors import BadInputError, first_line

logger = logging.getLogger(__name__)

ENCODER_FILE = "encoder.json"
MODEL_FILE = "model.onnx"
INT8_MODEL_FILE = "model_int8.onnx"
TOKENIZER_FILE = "tokenizer.json"
# Bump when the export's files or encoder.json change shape: older exports are then made again.
# 2: the graph is traced with eager attention (see export_model).
EXPORT_FORMAT = 2
ONNX_OPSET = 17
# Pooling modes the runtime encoder implements (sentence-transformers' names).
SUPPORTED_POOLING = ("mean", "cls", "max")
EXPORT_TIMEOUT_S = 900.0
# In encoder.json: the size of each exported file, checked before an export is used.
SIZES_KEY = "file_sizes"


class OnnxExportError(BadInputError):
    """The model folder cannot be exported to ONNX (not a Transformer + Pooling sentence-transformers model)."""


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/lookup-knowledge/onnx` (or ~/.cache/...): shared by every state dir of the user."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lookup-knowledge" / "onnx"


def _model_files(model_dir: Path) -> list[Path]:
    """
    The files of a model folder that can change its vectors: hidden files and folders left out, and
    in a folder `knowledge adapt` wrote its description (card, record, calibration), which it
    rewrites after the model is exported.
    """
    described = (model_dir / ADAPT_RECORD).is_file()
    files = []
    for path in sorted(model_dir.rglob("*")):
        relative = path.relative_to(model_dir)
        if described and str(relative) in DESCRIPTION_FILES:
            continue
        if path.is_file() and not any(part.startswith(".") for part in relative.parts):
            files.append(path)
    return files


def _stat_key(model_dir: Path, files: list[Path]) -> str:
    # The format too: a note written for an older export format must not lead to that export.
    digest = hashlib.sha256(f"{model_dir}\0format={EXPORT_FORMAT}".encode())
    for path in files:
        stat = path.stat()
        digest.update(f"{path.relative_to(model_dir)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:32]


def _content_key(model_dir: Path, files: list[Path]) -> str:
    digest = hashlib.sha256(f"format={EXPORT_FORMAT};opset={ONNX_OPSET}\n".encode())
    for path in files:
        digest.update(f"{path.relative_to(model_dir)}\n".encode())
        with path.open("rb") as stream:
            for block in iter(lambda s=stream: s.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:32]


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, encoding="utf-8") as stream:
        stream.write(text)
    os.replace(stream.name, path)


def export_dir(model_dir: str | Path, cache_dir: str | Path | None = None) -> Path:
    """
    The cache folder of a model folder's export (which may not exist yet). Hashes the model's files
    only the first time a folder is seen with these sizes and mtimes.
    """
    model_dir = Path(model_dir).resolve()
    if not model_dir.is_dir():
        raise OnnxExportError(f"embedder.backend=onnx needs a local model folder; {model_dir} is not one")
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    files = _model_files(model_dir)
    note = root / "by-stat" / _stat_key(model_dir, files)
    try:
        key = note.read_text(encoding="utf-8").strip()
    except OSError:
        key = _content_key(model_dir, files)
        try:
            _write_atomically(note, key)
        except OSError:  # a read-only cache still serves the exports it holds; an export says why it cannot
            logger.debug("cannot write the ONNX cache note %s", note)
    return root / key


def check_cache_writable(folder: Path) -> None:
    """An export needs its cache folder writable: say which setting to change, not a bare errno."""
    root = folder.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
        writable = os.access(root, os.W_OK)  # EROFS too, even for root
    except OSError:
        writable = False
    if not writable:
        raise OnnxExportError(
            f"the ONNX cache {root} is not writable, and the model must be exported into it once: give "
            "embedder.onnx_cache_dir a writable folder, or embedder.backend=torch"
        )


def discard_export(folder: Path) -> None:
    """Move a cache entry that does not load out of the way (then removed), so that it is exported again."""
    logger.warning("The ONNX export %s is damaged (a file cut, or one that does not load): exporting again", folder)
    aside = folder.with_name(f".damaged-{folder.name}-{os.getpid()}")
    try:
        os.rename(folder, aside)
    except OSError:  # gone already (another process discarded it), or cannot be moved: the export says why
        return
    shutil.rmtree(aside, ignore_errors=True)


def is_exported(folder: Path, quantized: bool = False) -> bool:
    return intact(folder) and (folder / (INT8_MODEL_FILE if quantized else MODEL_FILE)).is_file()


def intact(folder: Path) -> bool:
    """
    The export's files as written: `encoder.json` readable and each file of the sizes it records
    (a cut file is caught by its size; a hash of the 90 MB graph would cost every cold start, see
    docs/embedding-backends.md).
    """
    try:
        recorded = json.loads((folder / ENCODER_FILE).read_text(encoding="utf-8")).get(SIZES_KEY, {})
        return all((folder / name).stat().st_size == size for name, size in recorded.items())
    except (OSError, ValueError, AttributeError):
        return False


def ensure_exported(model_dir: str | Path, cache_dir: str | Path | None = None, quantized: bool = False) -> Path:
    """
    The export folder of a model, exported first (in a child process, which imports torch) when the
    cache does not hold it yet.

    :raises OnnxExportError: The model cannot be exported; the child's last error line says why.
    """
    folder = export_dir(model_dir, cache_dir)
    if is_exported(folder, quantized):
        return folder
    check_cache_writable(folder)
    if folder.exists() and not intact(folder):
        discard_export(folder)
    logger.info("Exporting %s to ONNX into %s (once per model)", model_dir, folder)
    command = [sys.executable, "-m", "components.common.onnx_export", str(model_dir), "--output", str(folder)]
    if quantized:
        command.append("--int8")
    env = dict(os.environ)
    # The child imports this checkout's `components`, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH")]))
    env.setdefault("HF_HUB_OFFLINE", "1")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False)
    if done.returncode != 0 or not is_exported(folder, quantized):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise OnnxExportError(f"cannot export {model_dir} to ONNX: {last.removeprefix('error: ')}")
    return folder


# Everything below runs in the export process (torch, transformers, sentence-transformers).


def _encoder_settings(model) -> dict:
    """What the runtime encoder must do after the transformer, read from the loaded model's modules."""
    names = [type(module).__name__ for module in model]
    if names not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise OnnxExportError(
            f"ONNX export supports Transformer + Pooling (+ Normalize) models, this one is {' + '.join(names)}: "
            "use embedder.backend=torch"
        )
    transformer, pooling = model[0], model[1]
    mode = pooling.pooling_mode
    if not isinstance(mode, str) or mode not in SUPPORTED_POOLING or not getattr(pooling, "include_prompt", True):
        raise OnnxExportError(f"pooling {mode!r} is not supported by the ONNX backend ({', '.join(SUPPORTED_POOLING)})")
    if not getattr(transformer.tokenizer, "is_fast", False):
        raise OnnxExportError("the ONNX backend needs a model with a fast tokenizer (tokenizer.json)")
    return {
        "format": EXPORT_FORMAT,
        "pooling": mode,
        "normalize": len(names) == 3,
        "max_seq_length": int(model.max_seq_length),
        "do_lower_case": bool(getattr(transformer, "do_lower_case", False)),
        "dimension": int(model.get_embedding_dimension()),
    }


def _export_transformer(model, target: Path) -> None:
    import torch

    transformer = model[0].auto_model.eval()
    features = model.tokenize(["an example sentence to trace the graph", "a second one"])
    input_names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in features]

    class TokenEmbeddings(torch.nn.Module):
        """Keyword call of the transformer (its positional order changes between versions)."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.inner(**dict(zip(input_names, inputs, strict=True))).last_hidden_state

    dynamic = {name: {0: "batch", 1: "sequence"} for name in [*input_names, "token_embeddings"]}
    with torch.no_grad():
        torch.onnx.export(
            TokenEmbeddings(transformer),
            tuple(features[name] for name in input_names),
            str(target),
            input_names=input_names,
            output_names=["token_embeddings"],
            dynamic_axes=dynamic,
            opset_version=ONNX_OPSET,
            dynamo=False,  # the TorchScript exporter: one self-contained file, no onnxscript rewrite
        )


def export_model(model_dir: Path, output: Path) -> None:
    """Export a model folder into `output` (written beside it, then renamed into place)."""
    from sentence_transformers import SentenceTransformer

    # Eager attention traces to plain MatMul/Softmax; the default (torch's fused SDPA kernel) traces
    # to extra IsNaN/Where passes over every batch x heads x length x length score tensor, which
    # cost ONNX Runtime a large share of its indexing throughput (docs/embedding-backends.md).
    model = SentenceTransformer(
        str(model_dir), device="cpu", local_files_only=True, model_kwargs={"attn_implementation": "eager"}
    )
    settings = _encoder_settings(model)
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}-", dir=output.parent))
    try:
        _export_transformer(model, staging / MODEL_FILE)
        model[0].tokenizer.backend_tokenizer.save(str(staging / TOKENIZER_FILE))
        settings["source"] = str(model_dir)
        settings[SIZES_KEY] = {name: (staging / name).stat().st_size for name in (MODEL_FILE, TOKENIZER_FILE)}
        (staging / ENCODER_FILE).write_text(json.dumps(settings, indent=2), encoding="utf-8")
        try:
            os.rename(staging, output)
        except OSError:  # another process exported the same model meanwhile: keep its folder
            if not is_exported(output):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def quantize_model(folder: Path) -> None:
    """Add `model_int8.onnx`: dynamic int8 quantization of the exported graph's weights."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    staging = folder / f".{INT8_MODEL_FILE}.{os.getpid()}"
    quantize_dynamic(str(folder / MODEL_FILE), str(staging), weight_type=QuantType.QInt8)
    os.replace(staging, folder / INT8_MODEL_FILE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m components.common.onnx_export",
        description="Export a sentence-transformers model folder to ONNX (what the ONNX backend does on first use).",
    )
    parser.add_argument("model_dir", type=Path, help="the model folder")
    parser.add_argument("--output", type=Path, help="export folder (default: the cache folder of the model)")
    parser.add_argument("--int8", action="store_true", help="also write the int8-quantized variant")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        output = args.output or export_dir(args.model_dir)
        if not is_exported(output):
            export_model(args.model_dir.resolve(), output)
        if args.int8 and not is_exported(output, quantized=True):
            quantize_model(output)
    except Exception as exc:  # one line for the parent process, which reports it
        print(f"error: {first_line(exc)}", file=sys.stderr)
        return 2
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
