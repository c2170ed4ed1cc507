"""What a client may choose: the operator's allow-list of strategies, verifiers and calibrations.

A request chooses a strategy by name (``sc-16/<model>`` or ``tts.strategy``) and may tune it, but
only within what the operator set up when the server started:

- **Knobs** (fields typed as a number, a boolean or a ``Literal`` choice, optionally None) take any
  value of that JSON type within the field's own range and this server's caps (token settings up to
  ``max_tokens``, sample counts up to ``max_samples``). A knob sent as text is refused: some
  configs read text as a file (``auto``'s ``efficiency``), and a client sends numbers.
- **Named resources** are chosen by name among the operator's: a ``verifier`` names one of the
  server's verifiers (built in: those that run on the served model or on no model; more with
  ``tts serve --verifier NAME=SPEC``), optionally with knob overrides
  (``{"kind": "checker", "neutral": 0.3}``); a ``calibration`` names one from
  ``tts serve --calibration NAME=PATH`` (or equals its path); ``auto``'s ``strategies`` lists
  strategies this server offers.
- **Everything else** (text, templates, paths, model ids, URLs, nested configs) the operator owns:
  a request may send it only equal to the value the server would use anyway (the field's default
  or the operator's setting for that strategy), so a client never makes the server open a file,
  load a model, reach the network or run a format string of its choosing.

**Caps** hold whoever asks: the HTTP server and the MCP tool check ``max_tokens``, the compute
budget and the strategy's sample count with the same methods (:meth:`ServePolicy.check_max_tokens`,
:meth:`ServePolicy.solve_budget`, :meth:`ServePolicy.strategy_config`); a transport only names the
unit of work in its messages (a request, a call).

Strategies: ``ServeConfig.strategies``, or by default every registered strategy whose config is
complete with the operator's settings (``auto`` needs a calibration, ``graph`` a graph).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel

from tts.serve.config import ServeConfig

IN_PROCESS_VERIFIERS = ("arithmetic", "judge", "logprob", "self_certainty")
"""Verifiers every server offers by name: they score with the served model or with no model at all
(a PRM loads its own model: the operator names one with ``tts serve --verifier``)."""

_SAMPLE_COUNTS = frozenset({"n_max", "pilot", "parallel"})
"""Knobs that count samples, capped by the server's ``max_samples`` (``n`` is checked on the built
config, where the model name and ``tts.n`` have set it)."""

_MAX_NESTING = 4
"""Nested verifier configs a request may reach (a strategy's verifier, a verifier's verifier, ...)."""


def setting_error(exc: ValueError) -> str:
    """One line for a config error (a pydantic error as ``field: problem``, without links)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'config'}: {e['msg']}" for e in exc.errors())
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class PolicyError(ValueError):
    """A strategy setting this server does not let requests choose, or an input over one of its
    caps; ``param`` names the input, ``code`` says which kind of refusal (None: a plain one)."""

    def __init__(self, message: str, param: str = "tts.strategy", code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def _arms(annotation: Any) -> list[Any]:
    """The types a field accepts: Annotated and Optional/Union unwrapped."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _arms(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [arm for a in typing.get_args(annotation) for arm in _arms(a)]
    return [annotation]


def operator_only(field: Any) -> bool:
    """Whether a field is the operator's even though it is a knob (``unsafe_no_sandbox``): marked
    ``json_schema_extra={"operator_only": True}`` on the config."""
    extra = getattr(field, "json_schema_extra", None)
    return isinstance(extra, Mapping) and bool(extra.get("operator_only"))


CODE_REFUSED = ("runs model-written programs, and this server does not run code for requests (its operator "
                "enables it with tts serve --allow-code-execution)")


def _is_knob_arm(arm: Any) -> bool:
    return arm in (int, float, bool, type(None)) or typing.get_origin(arm) is Literal


def is_knob(annotation: Any) -> bool:
    """Whether a field type is a number, a boolean or a Literal choice (optionally None)."""
    return all(_is_knob_arm(arm) for arm in _arms(annotation))


def _knob_accepts(annotation: Any, value: Any) -> bool:
    """Whether a raw JSON value has the knob's own type (no text converted to a number)."""
    for arm in _arms(annotation):
        if arm is type(None) and value is None:
            return True
        if arm is bool and isinstance(value, bool):
            return True
        if arm is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if arm is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if typing.get_origin(arm) is Literal and any(
                value == choice and type(value) is type(choice) for choice in typing.get_args(arm)):
            return True
    return False


def _knob_expects(annotation: Any) -> str:
    """What a knob takes, for a message: ``a number``, ``true or false``, ``one of 'a', 'b'``."""
    kinds: list[str] = []
    for arm in _arms(annotation):
        if arm in (int, float):
            kinds.append("a number")
        elif arm is bool:
            kinds.append("true or false")
        elif arm is type(None):
            kinds.append("null")
        else:
            kinds.append("one of " + ", ".join(repr(c) for c in typing.get_args(arm)))
    return " or ".join(dict.fromkeys(kinds))


def _is_verifier_field(annotation: Any) -> bool:
    from tts.config import VerifierConfigBase

    return any(isinstance(arm, type) and issubclass(arm, VerifierConfigBase) for arm in _arms(annotation))


def _default(field: Any) -> Any:
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        return PydanticUndefined  # built per instance: no client value equals it by construction
    return field.default


def _same(a: Any, b: Any) -> bool:
    """Whether a client value equals a configured one (a tuple field may arrive as a JSON list)."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(b, BaseModel):  # compared as data: client values are never run through validators here
        return isinstance(a, Mapping) and dict(a) in (b.model_dump(mode="json"), b.model_dump(mode="json",
                                                                                              exclude_unset=True))
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def _runs_code_by_default(kind: str) -> bool:
    """Whether strategy ``kind`` runs model-written programs with its default settings (its config
    built from defaults alone, unvalidated: only ``runs_code`` is read)."""
    from tts.registry import STRATEGIES

    return bool(getattr(STRATEGIES.load(kind).config_class.model_construct(), "runs_code", False))


class ServePolicy:
    """The strategies, verifiers and calibrations a request may choose, and the check of its settings.

    Build it with :meth:`build`; :meth:`resolve` turns a request's strategy spec into the spec to run
    (names replaced by the operator's configs) or raises :class:`PolicyError`.
    """

    def __init__(self, config: ServeConfig, settings: Mapping[str, Mapping[str, Any]],
                 verifiers: Mapping[str, Mapping[str, Any]], check_default: Any) -> None:
        self.config = config
        self.settings = {k: dict(v) for k, v in settings.items()}
        """The operator's settings per strategy kind (the session's ``strategy_settings``)."""
        self.verifiers = {k: dict(v) for k, v in verifiers.items()}
        """Verifier name -> its config (a mapping with the registered ``kind``)."""
        self.calibrations = dict(config.calibrations)
        self._check_default = check_default
        self._works: dict[str, bool] = {}
        self.fill: dict[str, dict[str, Any]] = {}
        """Settings the policy adds where a request and the session leave them out (``auto``'s
        calibration: the operator's first)."""

    @classmethod
    def build(cls, config: ServeConfig, session: Any) -> ServePolicy:
        """The policy of a server: ``config``'s lists over ``session``'s strategy settings.

        Raises:
            ValueError: A configured verifier or strategy that cannot run (the message says which).
        """
        from tts.budgets.pricing import ComputeBudget
        from tts.config import parse_verifier_config
        from tts.registry import STRATEGIES, VERIFIERS

        verifiers: dict[str, dict[str, Any]] = {k: {"kind": k} for k in IN_PROCESS_VERIFIERS if k in VERIFIERS.names()}
        for name, spec in config.verifiers.items():
            try:
                parse_verifier_config(dict(spec))
            except ValueError as exc:
                raise ValueError(f"verifier {name!r}: {setting_error(exc)}") from None
            verifiers[name] = dict(spec)
        budget = ComputeBudget(config.max_budget_tokens, "tokens")
        settings = {k: dict(v) for k, v in (getattr(session, "strategy_settings", {}) or {}).items()}
        fill: dict[str, dict[str, Any]] = {}
        if config.calibrations and "calibration" not in settings.get("auto", {}):  # the first is auto's default
            fill["auto"] = {"calibration": next(iter(config.calibrations.values()))}

        def check_default(kind: str) -> None:
            session.strategy_config({"kind": kind, **fill.get(kind, {})}, None, budget)

        policy = cls(config, {k: {**settings.get(k, {}), **fill.get(k, {})} for k in {*settings, *fill}},
                     verifiers, check_default)
        policy.fill = fill
        for kind in config.strategies or ():
            STRATEGIES.check(kind)
            if not config.allow_code_execution and _runs_code_by_default(kind):
                raise ValueError(f"strategy {kind!r} runs model-written programs: allow code execution "
                                 "(tts serve --allow-code-execution) or do not offer it")
            try:
                check_default(kind)
            except ValueError as exc:
                raise ValueError(f"strategy {kind!r} cannot run with this server's settings ({setting_error(exc)}); "
                                 "give what it needs (auto: --calibration) or do not allow it") from None
        return policy

    # --- strategies ------------------------------------------------------------------------------

    def allows(self, kind: str) -> bool:
        """Whether requests may run strategy ``kind``."""
        from tts.registry import STRATEGIES

        if self.config.strategies is not None:
            return kind in self.config.strategies
        if kind not in STRATEGIES.names():
            return False
        if not self.config.allow_code_execution and _runs_code_by_default(kind):
            return False
        if kind not in self._works:  # complete with the operator's settings (auto needs a calibration)
            try:
                self._check_default(kind)
                self._works[kind] = True
            except Exception:  # noqa: BLE001 - any failure means "not offered", never a 500
                self._works[kind] = False
        return self._works[kind]

    def offered(self) -> list[str]:
        """The strategies requests may run, sorted."""
        from tts.registry import STRATEGIES

        return [k for k in STRATEGIES.names() if self.allows(k)]

    def _not_offered(self, kind: str) -> str:
        from tts.registry import STRATEGIES

        extra = "" if self.config.strategies is not None else (
            "; auto needs tts serve --calibration, graph a graph in the operator's settings"
            if kind in ("auto", "graph") else
            f"; {kind} {CODE_REFUSED}" if kind in STRATEGIES.names() and _runs_code_by_default(kind) else "")
        return f"strategy {kind!r} is not offered on this server; use one of {', '.join(self.offered())}{extra}"

    # --- the caps ----------------------------------------------------------------------------------

    def check_max_tokens(self, max_tokens: int | None, param: str = "max_tokens") -> None:
        """Refuse a per-sample ``max_tokens`` over the server's ``max_tokens``."""
        if max_tokens is not None and max_tokens > self.config.max_tokens:
            raise PolicyError(f"max_tokens={max_tokens} is over this server's limit of {self.config.max_tokens} "
                              "tokens per sample; lower it", param)

    def token_cap(self) -> tuple[int, str]:
        """(the most generated tokens one request or call may spend, which limit that is)."""
        cap, why = self.config.max_budget_tokens, "this server's limit"
        if self.config.rate_limit_tokens is not None and self.config.rate_limit_tokens < cap:
            cap, why = self.config.rate_limit_tokens, "this server's rate limit"
        return cap, why

    def solve_budget(self, pricer: Any, asked: Any, sample_tokens: int, *, solves: int = 1, share: float = 1.0,
                     per: str = "request", param: str = "tts.budget", split_param: str = "n") -> tuple[Any, int]:
        """The budget each of ``solves`` solves runs under, and its worst case in generated tokens.

        The cap (:meth:`token_cap`) holds per request (or call): its solves split it evenly, each a
        budget its strategy plans within, so that together they cannot spend more. A budget the
        client ``asked`` for (a :class:`~tts.budgets.pricing.ComputeBudget`, per solve) must fit the cap
        at its worst case (the shortest prompt: no solve's allowance is larger); without one, each
        solve gets ``share`` of the cap split over the solves, which must hold one sample of
        ``sample_tokens`` (else the refusal names ``split_param``, what to lower).

        Raises:
            PolicyError: Over the cap (code ``budget_too_large``), or a budget that does not cover
                one sample (code ``invalid_budget``).
        """
        from tts.budgets.pricing import BudgetError, ComputeBudget
        from tts.serve.failures import one_line

        cap, why = self.token_cap()
        try:
            if asked is not None:
                tokens = pricer.allowance(asked, 1, sample_tokens)
                if tokens * solves > cap:
                    total = f" x {solves} solves (n choices x prompts) = {tokens * solves}" if solves > 1 else ""
                    raise PolicyError(f"a budget of {asked} allows {tokens} generated tokens{total}, over {why} of "
                                      f"{cap} per {per}; lower the budget{' or n' if solves > 1 else ''}", param,
                                      "budget_too_large")
                return asked, tokens
        except BudgetError as exc:
            raise PolicyError(one_line(exc), param, "invalid_budget") from None
        tokens = int(cap * share) // solves
        if tokens < sample_tokens:
            if solves == 1 and share == 1:
                raise PolicyError(f"{why} of {cap} generated tokens per {per} is less than one sample of "
                                  f"max_tokens={sample_tokens}; lower max_tokens", "max_tokens", "budget_too_large")
            raise PolicyError(f"{why} of {cap} generated tokens per {per}, split over {solves} solves (n choices x "
                              f"prompts), leaves {tokens} each, less than one sample of max_tokens={sample_tokens}; "
                              "lower n, send fewer prompts or lower max_tokens",
                              split_param, "budget_too_large")
        return ComputeBudget(tokens, "tokens"), tokens

    def strategy_config(self, session: Any, spec: Mapping[str, Any], n: int | None, budget: Any,
                        samples_limit: str = "", n_hint: str = "", param: str = "tts.n") -> Any:
        """The strategy config a resolved ``spec`` builds on ``session``, its sample count checked
        against ``max_samples`` (``samples_limit`` words the limit after its number, ``n_hint`` says
        where n was set).

        Raises:
            PolicyError: Settings the strategy refuses (param ``tts.strategy``), or too many samples.
        """
        from tts.serve.failures import one_line

        try:
            config = session.strategy_config(dict(spec), n, budget)
        except ValueError as exc:  # unknown strategy (UnknownNameError) or settings it refuses
            line = one_line(exc)
            head = f"strategy {spec.get('kind', spec)!r}: "
            raise PolicyError(line if line.startswith(head) else head + line, "tts.strategy") from None
        if getattr(config, "runs_code", False) and not self.config.allow_code_execution:
            raise PolicyError(f"strategy {config.kind!r} with these settings {CODE_REFUSED}", "tts.strategy",
                              "code_execution_disabled")
        samples = getattr(config, "n", None)
        if samples is not None and samples > self.config.max_samples:
            raise PolicyError(f"n={samples} is over this server's limit of {self.config.max_samples}{samples_limit}; "
                              f"lower n{n_hint}", param)
        return config

    # --- the check ---------------------------------------------------------------------------------

    def resolve(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The strategy spec to run for a request's ``spec``: every setting checked, names resolved.

        Raises:
            PolicyError: A strategy not offered, or a setting requests may not choose (the message
                says what to send instead; ``param`` is ``tts.strategy.<field>``).
        """
        from tts.registry import STRATEGIES

        kind = spec.get("kind")
        if not isinstance(kind, str) or not self.allows(kind):
            if not isinstance(kind, str):
                raise PolicyError(f"a strategy object needs a 'kind' naming a strategy: one of "
                                  f"{', '.join(self.offered())}")
            raise PolicyError(self._not_offered(kind))
        cls = STRATEGIES.load(kind).config_class
        checked = self._check(dict(spec), cls, self.settings.get(kind, {}), "tts.strategy", 0)
        return {**self.fill.get(kind, {}), **checked}

    def _check(self, spec: dict[str, Any], cls: type[BaseModel], configured: Mapping[str, Any], where: str,
               depth: int) -> dict[str, Any]:
        out = dict(spec)
        for key, value in spec.items():
            if key == "kind":
                continue
            param = f"{where}.{key}"
            if key not in cls.model_fields:  # refused here too, whatever the config's own extra setting
                raise PolicyError(f"{param}: {spec.get('kind', where.rpartition('.')[2])!r} has no setting {key!r}; "
                                  f"its settings are {', '.join(k for k in cls.model_fields if k != 'kind')}", param)
            field = cls.model_fields[key]
            if is_knob(field.annotation) and not operator_only(field):
                if not _knob_accepts(field.annotation, value):
                    raise PolicyError(f"{param}: {key} must be {_knob_expects(field.annotation)}, "
                                      f"got {type(value).__name__ if not isinstance(value, str) else 'text'}", param)
                self._cap(key, value, param)
            elif _is_verifier_field(field.annotation):
                out[key] = self._verifier(value, param, depth)
            elif key == "calibration":
                out[key] = self._calibration(value, param, configured.get(key))
            elif key == "stop" and value is not None:  # a request's stop: its numbers and choices only
                from tts.config import StopConfig

                stop = {"rule": value} if isinstance(value, str) else value
                if not isinstance(stop, Mapping):
                    raise PolicyError(f"{param}: give a rule name (horizon, beta, dirichlet, exact, window) or "
                                      "{\"rule\": ..., numbers}", param)
                out[key] = self._check(dict(stop), StopConfig, {}, param, depth + 1)
            elif key == "strategies" and isinstance(value, list | tuple | str):
                names = value.split(",") if isinstance(value, str) else list(value)
                for name in names:
                    if not isinstance(name, str) or not self.allows(name.strip()):
                        raise PolicyError(f"{param}: {self._not_offered(str(name))}", param)
            elif not (key in configured and _same(value, configured[key])) and not _same(value, _default(field)):
                raise PolicyError(f"{param}: this server does not let requests set {key} (text, paths, models and "
                                  f"nested configs are the operator's); leave it out. Requests may set numbers, "
                                  f"true/false and choices, and name a verifier or calibration", param)
        return out

    def _cap(self, key: str, value: Any, param: str) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            return
        if key in _SAMPLE_COUNTS and value > self.config.max_samples:
            raise PolicyError(f"{param}: {key}={value} is over this server's limit of {self.config.max_samples} "
                              "samples; lower it", param)
        if "tokens" in key and value > self.config.max_tokens:
            raise PolicyError(f"{param}: {key}={value} is over this server's limit of {self.config.max_tokens} "
                              "tokens; lower it", param)

    def _verifier(self, value: Any, param: str, depth: int) -> Any:
        from tts.registry import VERIFIERS

        if value is None:
            return None
        name = value if isinstance(value, str) else value.get("kind") if isinstance(value, Mapping) else None
        if not isinstance(name, str):
            raise PolicyError(f"{param}: name a verifier ({', '.join(sorted(self.verifiers))}) or give "
                              "{\"kind\": <name>, ...numbers}", param)
        if name not in self.verifiers:
            raise PolicyError(f"{param}: {name!r} is not a verifier this server offers; use one of "
                              f"{', '.join(sorted(self.verifiers))} (operators add more with tts serve "
                              "--verifier NAME=SPEC)", param)
        base = self.verifiers[name]
        if isinstance(value, str):
            return dict(base)
        if depth >= _MAX_NESTING:
            raise PolicyError(f"{param}: verifiers nested too deep; name one", param)
        cls = VERIFIERS.load(str(base["kind"])).config_class
        overrides = {k: v for k, v in value.items() if k != "kind"}
        return {**base, **self._check(overrides, cls, base, param, depth + 1)}

    def _calibration(self, value: Any, param: str, configured: Any) -> Any:
        if isinstance(value, str):
            if value in self.calibrations:
                return self.calibrations[value]
            if value in self.calibrations.values() or (configured is not None and value == configured):
                return value
        names = ", ".join(repr(n) for n in sorted(self.calibrations)) or "none (the operator adds them with tts " \
                                                                       "serve --calibration NAME=PATH)"
        raise PolicyError(f"{param}: name a calibration this server has: {names}", param)
