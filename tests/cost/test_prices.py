"""GPU price table, user overrides and the cheapest-GPU ranking."""

from __future__ import annotations

import json

import pytest

from tts.cost import hardware
from tts.cost.prices import (
    DEFAULT_PRICES,
    PRICE_BASIS,
    PriceError,
    Quote,
    dollars,
    gpu_kind,
    load_prices,
    parse_prices,
    price_table,
    rank_by_dollars,
    usd_per_hour,
)


def test_every_gpu_in_the_hardware_table_has_a_dated_sourced_price():
    assert set(DEFAULT_PRICES) == set(hardware.HARDWARE)
    for key, price in DEFAULT_PRICES.items():
        assert 0.1 < price.usd_per_hour < 20, key
        assert "2026" in price.source and "pricing" in price.source, key
    assert "approximate" in PRICE_BASIS


def test_dollars_is_gpu_hours_times_the_hourly_price():
    assert dollars(3600, "h100") == pytest.approx(3.49)
    assert dollars(1800, "H100 SXM") == pytest.approx(3.49 / 2)
    assert dollars(36, "l40s") == pytest.approx(36 / 3600 * 1.09)
    assert dollars(0, "b200") == 0


def test_overrides_win_and_accept_aliases():
    assert dollars(3600, "h100-sxm", {"h100": 2.0}) == pytest.approx(2.0)
    assert usd_per_hour("a100", {"A100-80GB": 1.0}) == 1.0
    table = price_table({"4090": 0.3})
    assert table["rtx-4090"] == 0.3 and table["h200"] == DEFAULT_PRICES["h200"].usd_per_hour
    assert DEFAULT_PRICES["rtx-4090"].usd_per_hour != 0.3  # the defaults stay untouched


def test_the_calibrated_cpu_has_no_price_until_given_one():
    with pytest.raises(PriceError, match="--price cpu=USD_PER_HOUR"):
        usd_per_hour("cpu")
    assert dollars(7200, "cpu", {"cpu": 0.05}) == pytest.approx(0.1)


def test_unknown_gpu_names_the_known_kinds():
    with pytest.raises(PriceError, match="unknown GPU 'v100'.*H100-SXM.*RTX-4090"):
        dollars(1.0, "v100")
    assert gpu_kind(" H100 PCIe ") == "h100-pcie"


def test_price_file_yaml_and_json(tmp_path):
    yml = tmp_path / "prices.yaml"
    yml.write_text("h100: 2.10   # our cluster\nl40s: 1\n")
    assert load_prices(yml) == {"h100-sxm": 2.10, "l40s": 1.0}
    js = tmp_path / "prices.json"
    js.write_text(json.dumps({"B200": 5.5, "a100-40gb": 0}))
    assert load_prices(js) == {"b200": 5.5, "a100-40gb": 0.0}


@pytest.mark.parametrize("text, expected", [
    ("h100: [1, 2\n", "not valid YAML/JSON at line 2"),
    ("- 2.5\n", "is a list"),
    ("", "is empty"),
    ("v100: 2.0\n", "unknown GPU 'v100'"),
    ("h100: $2.49\n", "'$2.49' is not a price"),
    ("h100: -1\n", "-1 is not a price"),
    ("h100: true\n", "True is not a price"),
    ("h100: .nan\n", "nan is not a price"),
])
def test_a_malformed_price_file_is_one_line_that_says_what_to_change(tmp_path, text, expected):
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(PriceError) as err:
        load_prices(path)
    message = str(err.value)
    assert expected in message and str(path) in message and "\n" not in message
    assert "h100: 2.49" in message or "H100-SXM" in message  # an example or the known kinds


def test_a_missing_price_file_is_a_price_error(tmp_path):
    with pytest.raises(PriceError, match="cannot read it"):
        load_prices(tmp_path / "nope.yaml")


def test_price_flags():
    assert parse_prices(["h100=2.1", "L40S = 0.9"]) == {"h100-sxm": 2.1, "l40s": 0.9}
    for bad, expected in [("h100", "KIND=USD_PER_HOUR"), ("=2", "KIND=USD_PER_HOUR"),
                          ("h100=cheap", "'cheap' is not a price"), ("h100=-3", "'-3' is not"),
                          ("v100=2", "unknown GPU 'v100'")]:
        with pytest.raises(PriceError, match=expected):
            parse_prices([bad])


def _quotes() -> list[Quote]:
    # dollars: slow-cheap 0.01, mid 0.02, fast 0.03, huge 0.001 (does not fit)
    return [Quote("fast", 10.0, 10.8), Quote("slow-cheap", 36.0, 1.0),
            Quote("huge", 3.6, 1.0, fits=False), Quote("mid", 20.0, 3.6)]


def test_ranking_is_by_dollars_with_kinds_that_do_not_fit_last():
    r = rank_by_dollars(_quotes())
    assert [q.kind for q in r.quotes] == ["slow-cheap", "mid", "fast", "huge"]
    assert r.cheapest.kind == "slow-cheap" and r.fastest.kind == "fast"
    assert r.quotes[0].dollars == pytest.approx(0.01)


def test_the_latency_bound_picks_the_cheapest_kind_that_meets_it():
    assert rank_by_dollars(_quotes(), max_seconds=25).cheapest.kind == "mid"
    assert rank_by_dollars(_quotes(), max_seconds=20).cheapest.kind == "mid"  # inclusive
    assert rank_by_dollars(_quotes(), max_seconds=15).cheapest.kind == "fast"
    none = rank_by_dollars(_quotes(), max_seconds=5)  # only "huge" is that fast, and it cannot fit
    assert none.cheapest is None and none.fastest.kind == "fast"
    assert not none.meets(none.quotes[-1])
    with pytest.raises(ValueError, match="max_seconds"):
        rank_by_dollars(_quotes(), max_seconds=0)
