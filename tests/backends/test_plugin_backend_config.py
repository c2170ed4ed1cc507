"""A plugin backend can be configured: ``backend: {kind: <plugin>, ...}`` is validated by the
plugin's own ``config_class`` (the backend config used to be a closed union of the three built-ins,
so a registered plugin backend could not be named in a config at all)."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import Field, ValidationError

from tts.backends.factory import create_generator
from tts.backends.scripted import ScriptedGenerator
from tts.config import BackendConfigBase, EvalConfig, ScriptedBackendConfig, VLLMBackendConfig
from tts.registry import BACKENDS


class EchoConfig(BackendConfigBase):
    kind: Literal["echo_plugin"] = "echo_plugin"
    model: str = "echo"
    accuracy: float = Field(0.5, ge=0, le=0.9)
    seed: int = 0


class EchoBackend(ScriptedGenerator):
    """A plugin backend: the scripted model under another name, with its own config."""

    config_class = EchoConfig

    @classmethod
    def from_config(cls, config, problems=()):
        return cls.for_problems(problems, accuracy=config.accuracy, seed=config.seed, model_name=config.model)


class Configless(ScriptedGenerator):
    """A plugin backend that forgot its config class."""


@pytest.fixture
def plugins():
    BACKENDS.register("echo_plugin", EchoBackend)
    BACKENDS.register("configless_plugin", Configless)
    yield
    BACKENDS.unregister("echo_plugin")
    BACKENDS.unregister("configless_plugin")


def test_a_plugin_backend_is_configured_by_its_own_config_class(plugins):
    cfg = EvalConfig(backend={"kind": "echo_plugin", "model": "m", "accuracy": 0.8}, seed=7)
    assert type(cfg.backend) is EchoConfig and cfg.backend.accuracy == 0.8
    assert cfg.backend.seed == 7  # the run seed reaches a plugin's engine seed as it does a built-in's
    assert EvalConfig.model_validate(cfg.model_dump()).backend == cfg.backend  # round trip (run.json)
    gen = create_generator(cfg.backend, [])
    assert isinstance(gen, EchoBackend) and gen.model_name == "m"


def test_a_plugin_config_refuses_what_it_does_not_know(plugins):
    with pytest.raises(ValidationError, match="dtype"):
        EvalConfig(backend={"kind": "echo_plugin", "dtype": "float32"})
    with pytest.raises(ValidationError, match="accuracy"):
        EvalConfig(backend={"kind": "echo_plugin", "accuracy": 2})


def test_a_plugin_without_a_config_class_is_told_what_to_add(plugins):
    with pytest.raises(ValidationError, match="declares no config_class; give it one, a subclass of tts.config.BackendConfigBase"):
        EvalConfig(backend={"kind": "configless_plugin"})


def test_built_ins_and_unknown_kinds_read_as_before():
    assert type(EvalConfig().backend) is VLLMBackendConfig
    assert type(EvalConfig(backend={"model": "x"}).backend) is VLLMBackendConfig  # kind defaults to vllm
    assert type(EvalConfig(backend="scripted").backend) is ScriptedBackendConfig
    assert EvalConfig(backend={"kind": "scripted"}, seed=3).backend.seed == 3
    with pytest.raises(ValidationError, match="Unknown backend 'vlm'. Did you mean 'vllm'"):
        EvalConfig(backend={"kind": "vlm"})
