"""GPU prices: on-demand dollars per GPU-hour for each kind in the hardware table, and overrides.

The defaults are **approximate, 2025-2026 on-demand list prices** for one GPU rented by the hour
with no commitment, taken from one provider where it lists the kind (RunPod Secure Cloud) so that
the kinds compare on one footing. They are a starting point for ranking GPUs, not a quote: the same
H100 SXM rents for $2-4/h at GPU clouds and $7-12/h at the hyperscalers, and list prices moved by
10-20% within 2026 alone. Pass your own prices (a YAML/JSON file mapping kind -> $/GPU-hour, or
``KIND=USD`` pairs) wherever money matters.

Example:
    >>> dollars(3600, "h100")           # one GPU-hour on an H100 SXM at the default price
    3.49
    >>> dollars(3600, "h100", {"h100": 2.0})
    2.0
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tts.cost.hardware import ALIASES, HARDWARE

PRICE_BASIS = "approximate on-demand list prices, 2025-2026"
"""What the default prices are, in words (shown under every table that uses them)."""


@dataclass(frozen=True, slots=True)
class GpuPrice:
    """The rent of one GPU.

    Args:
        usd_per_hour: US dollars per GPU-hour.
        source: Where the number comes from, with the date it was read.
    """

    usd_per_hour: float
    source: str


_RUNPOD = "RunPod Secure Cloud on-demand pod (runpod.io/pricing)"
_READ = ("as transcribed on 2026-09-25 in the public dataset tgarg01/silybench-data "
         "(derived/csv/gpu_prices.csv)")
# Cross-checks, same page on other dates: privum/ai-compute-prices (Hugging Face dataset, read
# 2026-08-19) and datareceipts/data-receipts 109-gpu-pricing (read 2026-11-09). Hyperscaler
# figures are per GPU: the 8-GPU instance price divided by 8.
DEFAULT_PRICES: dict[str, GpuPrice] = {
    "h100-sxm": GpuPrice(3.49, f"{_RUNPOD}, H100 SXM 80GB, {_READ}; the same tier read $3.29 in "
                               "Aug and $3.99 in Nov 2026; Community Cloud $2.69; AWS p5.48xlarge "
                               "$6.88 after its June 2025 price cut"),
    "h100-pcie": GpuPrice(2.89, f"{_RUNPOD}, H100 PCIe 80GB, {_READ}; unchanged Aug-Nov 2026; "
                                "Community Cloud $1.99; Lambda 1x H100 PCIe $3.29"),
    "h200": GpuPrice(4.59, f"{_RUNPOD}, H200 SXM 141GB, {_READ}; Community Cloud $3.59; "
                           "Nebius HGX H200 $4.50"),
    "b200": GpuPrice(6.79, f"{_RUNPOD}, B200 180GB, {_READ}; unchanged Aug-Oct 2026; Community "
                           "Cloud $5.98; Lambda 1x B200 $6.99"),
    "a100-80gb": GpuPrice(1.59, f"{_RUNPOD}, A100 SXM 80GB, {_READ}; $1.79 in Nov 2026; "
                                "Community Cloud $1.39; AWS p4de.24xlarge $3.43"),
    # RunPod lists the 40GB A100 only in its Community Cloud (~$1.00, Aug 2026), so this one is
    # another provider's price: that is why it sits above the 80GB card's.
    "a100-40gb": GpuPrice(1.99, "Lambda on-demand 1x A100 SXM 40GB (lambda.ai/pricing), as "
                                "transcribed on 2026-09-25 in tgarg01/silybench-data; AWS "
                                "p4d.24xlarge $2.74"),
    "l40s": GpuPrice(1.09, f"{_RUNPOD}, L40S 48GB, {_READ}; Community Cloud $0.79; Nebius $1.55"),
    "rtx-4090": GpuPrice(0.74, f"{_RUNPOD}, RTX 4090 24GB, {_READ}; Community Cloud $0.34"),
}

_EXAMPLE = "e.g. 'h100: 2.49' in a file or --price h100=2.49"


class PriceError(ValueError):
    """A GPU name, price file or price flag to fix; the message says what to change."""


def known_kinds() -> list[str]:
    """The GPU kinds with a default price (display names, as the hardware table spells them)."""
    return [HARDWARE[k].name for k in DEFAULT_PRICES]


def gpu_kind(name: str) -> str:
    """The hardware-table key of a GPU name or alias (``"H100"`` -> ``"h100-sxm"``).

    ``"cpu"`` (the calibrated CPU) is a kind too; it has no default price.

    Raises:
        PriceError: An unknown name; the message lists the known ones.
    """
    key = str(name).strip().lower().replace(" ", "-")
    key = ALIASES.get(key, key)
    if key in HARDWARE or key == "cpu":
        return key
    raise PriceError(f"unknown GPU {name!r}: use one of {', '.join(known_kinds())} or cpu "
                     f"(aliases such as h100, a100, 4090 work too)")


def _usd(value: object, where: str) -> float:
    """A price checked to be a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0:
        raise PriceError(f"{where}: {value!r} is not a price; write US dollars per GPU-hour as a "
                         f"number >= 0 without a currency sign ({_EXAMPLE})")
    return float(value)


def _checked(overrides: Mapping[str, object], where: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in overrides.items():
        try:
            key = gpu_kind(name)
        except PriceError as exc:
            raise PriceError(f"{where}: {exc}") from None
        out[key] = _usd(value, f"{where}: {name}")
    return out


def price_table(overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """Dollars per GPU-hour for every priced kind: the defaults, then ``overrides`` on top.

    Args:
        overrides: Kind (name or alias) -> $/GPU-hour, e.g. from :func:`load_prices`.

    Returns:
        Hardware-table key -> $/GPU-hour.

    Raises:
        PriceError: An unknown kind or a value that is not a price >= 0.
    """
    table = {k: p.usd_per_hour for k, p in DEFAULT_PRICES.items()}
    if overrides:
        table.update(_checked(overrides, "prices"))
    return table


def usd_per_hour(kind: str, prices: Mapping[str, float] | None = None) -> float:
    """The price of one GPU-hour on ``kind``.

    Args:
        kind: A GPU name or alias (``h100``, ``L40S``, ...).
        prices: Overrides of the defaults, kind -> $/GPU-hour.

    Raises:
        PriceError: An unknown kind, or a kind with no price (``cpu`` unless overridden).
    """
    key = gpu_kind(kind)
    table = price_table(prices)
    if key not in table:
        raise PriceError(f"no price for {kind!r}; give one with --price {key}=USD_PER_HOUR "
                         f"or a price file")
    return table[key]


def dollars(gpu_seconds: float, kind: str, prices: Mapping[str, float] | None = None) -> float:
    """US dollars for ``gpu_seconds`` of one ``kind`` GPU at its hourly price.

    Args:
        gpu_seconds: GPU time, e.g. a :class:`~tts.cost.cost_model.Cost`'s ``seconds``.
        kind: A GPU name or alias.
        prices: Overrides of the defaults, kind -> $/GPU-hour.

    Example:
        >>> round(dollars(36.0, "l40s"), 4)      # 36 s at $1.09/h
        0.0109
    """
    return gpu_seconds / 3600.0 * usd_per_hour(kind, prices)


def load_prices(path: str | os.PathLike[str]) -> dict[str, float]:
    """Read a price file: a YAML or JSON mapping of GPU kind -> US dollars per GPU-hour.

    Example file::

        h100: 2.49      # what we pay on our cluster
        l40s: 0.86

    Returns:
        Hardware-table key -> $/GPU-hour (only the kinds in the file).

    Raises:
        PriceError: The file is missing, unparseable, not a mapping, names an unknown GPU or holds
            a value that is not a price.
    """
    import yaml

    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise PriceError(f"price file {p}: cannot read it ({exc.strerror or exc}); pass an "
                         f"existing YAML/JSON file of 'KIND: USD_PER_HOUR' lines") from None
    try:
        data = yaml.safe_load(text)  # JSON is YAML too
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise PriceError(f"price file {p} is not valid YAML/JSON{at} ({problem}); write one "
                         f"'KIND: USD_PER_HOUR' line per GPU ({_EXAMPLE})") from None
    if not isinstance(data, dict) or not data:
        got = "empty" if data is None or data == {} else f"a {type(data).__name__}"
        raise PriceError(f"price file {p} is {got}; it must map GPU kinds to US dollars per "
                         f"GPU-hour ({_EXAMPLE})")
    return _checked(data, f"price file {p}")


def parse_prices(items: Iterable[str]) -> dict[str, float]:
    """Parse ``KIND=USD_PER_HOUR`` pairs (the ``--price`` flag), e.g. ``["h100=2.49"]``.

    Raises:
        PriceError: A pair without ``=``, an unknown kind or a value that is not a price.
    """
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise PriceError(f"--price {item!r}: write KIND=USD_PER_HOUR, e.g. --price h100=2.49")
        try:
            key = gpu_kind(name)
        except PriceError as exc:
            raise PriceError(f"--price {item}: {exc}") from None
        try:
            usd = float(value)
        except ValueError:
            usd = math.nan
        out[key] = _usd(usd if math.isfinite(usd) and usd >= 0 else value.strip(),
                        f"--price {item}")
    return out


@dataclass(frozen=True, slots=True)
class Quote:
    """One GPU kind's predicted time and price for a unit of work (say, one problem).

    Args:
        kind: Display name of the GPU kind.
        seconds: Predicted wall seconds.
        usd_per_hour: Its price per GPU-hour.
        fits: Whether the work fits in the GPUs' memory.
        gpus: GPUs that run it together (tensor parallelism), all rented for ``seconds``.
    """

    kind: str
    seconds: float
    usd_per_hour: float
    fits: bool = True
    gpus: int = 1

    @property
    def dollars(self) -> float:
        """US dollars for the work: GPU-seconds (seconds times the GPUs) times the hourly price."""
        return self.seconds * self.gpus / 3600.0 * self.usd_per_hour


@dataclass(frozen=True, slots=True)
class Ranking:
    """GPU kinds ordered cheapest first, and the choices a user asks for.

    Args:
        quotes: Kinds that fit, cheapest first (ties: faster first), then those that do not fit.
        max_seconds: The latency bound, if any.
        cheapest: The cheapest kind that fits and meets the bound (None: none does).
        fastest: The fastest kind that fits (None: none fits).
    """

    quotes: tuple[Quote, ...]
    max_seconds: float | None
    cheapest: Quote | None
    fastest: Quote | None

    def meets(self, quote: Quote) -> bool:
        """Whether ``quote`` fits and is within the latency bound (always, without a bound)."""
        return quote.fits and (self.max_seconds is None or quote.seconds <= self.max_seconds)


def rank_by_dollars(quotes: Sequence[Quote], max_seconds: float | None = None) -> Ranking:
    """Order GPU kinds by dollars and pick the cheapest one meeting a latency bound.

    This is the question Mélange (Griggs et al., 2024) asks of a GPU fleet, for one kind at a
    time: the cheapest GPU type whose predicted seconds stay within the bound.

    Args:
        quotes: One per GPU kind.
        max_seconds: The bound on seconds; None picks the cheapest overall.

    Raises:
        ValueError: ``max_seconds`` is not positive.
    """
    if max_seconds is not None and not max_seconds > 0:
        raise ValueError(f"max_seconds must be > 0 seconds, got {max_seconds}")
    ordered = tuple(sorted(quotes, key=lambda q: (not q.fits, q.dollars, q.seconds, q.kind)))
    fit = [q for q in ordered if q.fits]
    within = [q for q in fit if max_seconds is None or q.seconds <= max_seconds]
    return Ranking(ordered, max_seconds, within[0] if within else None,
                   min(fit, key=lambda q: (q.seconds, q.dollars)) if fit else None)
