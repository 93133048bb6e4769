"""Kubernetes quantities: parsing, canonical integer units, display and the map helpers."""

from __future__ import annotations

from decimal import Decimal

import pytest

from events.quantity import (
    QuantityError,
    add_into,
    format_units,
    parse_quantity,
    resource_map,
    to_units,
)

KI, MI, GI, TI = 2**10, 2**20, 2**30, 2**40


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100m", Decimal("0.1")),
        ("1", Decimal(1)),
        ("1.5", Decimal("1.5")),
        ("2Gi", Decimal(2 * GI)),
        ("1Ti", Decimal(TI)),
        ("500Mi", Decimal(500 * MI)),
        ("1Ki", Decimal(KI)),
        ("1e3", Decimal(1000)),
        ("1E-3", Decimal("0.001")),
        ("2e+2", Decimal(200)),
        ("1k", Decimal(1000)),
        ("1M", Decimal(10**6)),
        ("1G", Decimal(10**9)),
        ("1E", Decimal(10**18)),
        ("250u", Decimal("0.00025")),
        ("5n", Decimal("0.000000005")),
        ("0.1", Decimal("0.1")),
        (".5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("+3", Decimal(3)),
        (" 7 ", Decimal(7)),
        (3, Decimal(3)),
        (0.25, Decimal("0.25")),
        ("-1", Decimal(-1)),
    ],
    ids=lambda v: str(v) if not isinstance(v, Decimal) else "value",
)
def test_parse_quantity(text: str | int | float, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("resource", "text", "units"),
    [
        pytest.param("cpu", "100m", 100, id="cpu-100m"),
        pytest.param("cpu", "1", 1000, id="cpu-1"),
        pytest.param("cpu", "1.5", 1500, id="cpu-1.5"),
        pytest.param("cpu", "0.1", 100, id="cpu-0.1-is-100-millicores"),
        pytest.param("cpu", "1e3", 1_000_000, id="cpu-1e3"),
        pytest.param("cpu", "1E-3", 1, id="cpu-1E-3"),
        pytest.param("cpu", "1k", 1_000_000, id="cpu-1k"),
        pytest.param("cpu", "0.0001", 1, id="cpu-rounds-up-to-1m"),
        pytest.param("cpu", "1001u", 2, id="cpu-micro-rounds-up"),
        pytest.param("cpu", 2, 2000, id="cpu-int"),
        pytest.param("cpu", 0.5, 500, id="cpu-float"),
        pytest.param("cpu", "0", 0, id="cpu-zero"),
        pytest.param("memory", "2Gi", 2 * GI, id="memory-2Gi"),
        pytest.param("memory", "1Ti", TI, id="memory-1Ti"),
        pytest.param("memory", "500Mi", 500 * MI, id="memory-500Mi"),
        pytest.param("memory", "1M", 1_000_000, id="memory-1M"),
        pytest.param("memory", "1k", 1000, id="memory-1k"),
        pytest.param("memory", "1e3", 1000, id="memory-1e3"),
        pytest.param("memory", "1.5", 2, id="memory-1.5-rounds-up"),
        pytest.param("memory", "100m", 1, id="memory-milli-rounds-up"),
        pytest.param("memory", "1.5Gi", 3 * GI // 2, id="memory-1.5Gi"),
        pytest.param("memory", 1024, 1024, id="memory-int"),
        pytest.param("nvidia.com/gpu", "8", 8, id="gpu"),
        pytest.param("pods", "110", 110, id="pods"),
        pytest.param("memory", "9223372036854775807", 2**63 - 1, id="memory-int64-max"),
    ],
)
def test_to_units(resource: str, text: str | int | float, units: int) -> None:
    assert to_units(resource, text) == units


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "invalid quantity ''", id="empty"),
        pytest.param("abc", "invalid quantity 'abc'", id="letters"),
        pytest.param("1Qi", "invalid quantity '1Qi'", id="unknown-suffix"),
        pytest.param("--1", "invalid quantity '--1'", id="double-sign"),
        pytest.param("1.2.3", "invalid quantity '1.2.3'", id="two-points"),
        pytest.param("1 Gi", "invalid quantity '1 Gi'", id="inner-space"),
        pytest.param("Gi", "invalid quantity 'Gi'", id="suffix-only"),
        pytest.param(True, "invalid quantity True", id="bool"),
        pytest.param(float("nan"), "invalid quantity nan", id="nan"),
        pytest.param(float("inf"), "invalid quantity inf", id="inf"),
        pytest.param("1e400000000", "invalid quantity '1e400000000'", id="huge-exponent"),
    ],
)
def test_parse_quantity_rejects(text: object, message: str) -> None:
    with pytest.raises(QuantityError, match="^" + message.replace(".", r"\.")):
        parse_quantity(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("resource", "text", "message"),
    [
        pytest.param("cpu", "abc", "invalid quantity 'abc' for cpu", id="invalid-names-resource"),
        pytest.param("memory", "", "invalid quantity '' for memory", id="empty"),
        pytest.param("cpu", True, "invalid quantity True for cpu", id="bool"),
        pytest.param("cpu", "-1", "negative quantity '-1' for cpu", id="negative"),
        pytest.param("memory", "-100m", "negative quantity '-100m' for memory", id="neg-frac"),
        pytest.param("memory", -5, "negative quantity -5 for memory", id="negative-int"),
        pytest.param("cpu", -0.5, "negative quantity -0.5 for cpu", id="negative-float"),
        pytest.param("memory", "8Ei", "quantity '8Ei' for memory is out of range", id="over-int64"),
        pytest.param("cpu", "1e17", "quantity '1e17' for cpu is out of range", id="cpu-over-int64"),
        pytest.param(
            "cpu", "9e999999", "invalid quantity '9e999999' for cpu", id="decimal-overflow"
        ),
    ],
)
def test_to_units_rejects(resource: str, text: object, message: str) -> None:
    with pytest.raises(QuantityError) as info:
        to_units(resource, text)  # type: ignore[arg-type]
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("resource", "units", "text"),
    [
        pytest.param("cpu", 1500, "1500m", id="cpu-milli"),
        pytest.param("cpu", 2000, "2", id="cpu-whole"),
        pytest.param("cpu", 0, "0", id="cpu-zero"),
        pytest.param("memory", 2 * GI, "2Gi", id="memory-Gi"),
        pytest.param("memory", 512 * MI, "512Mi", id="memory-Mi"),
        pytest.param("memory", 3 * TI, "3Ti", id="memory-Ti"),
        pytest.param("memory", 1536 * MI, "1536Mi", id="memory-not-whole-Gi"),
        pytest.param("memory", 1000, "1000", id="memory-decimal-bytes"),
        pytest.param("memory", 0, "0", id="memory-zero"),
        pytest.param("nvidia.com/gpu", 8, "8", id="gpu"),
        pytest.param("ephemeral-storage", 2 * GI, str(2 * GI), id="binary-only-for-memory"),
    ],
)
def test_format_units(resource: str, units: int, text: str) -> None:
    assert format_units(resource, units) == text
    assert to_units(resource, text) == units


@pytest.mark.parametrize(
    ("resource", "text"),
    [
        ("cpu", "100m"),
        ("cpu", "1"),
        ("cpu", "2500m"),
        ("memory", "2Gi"),
        ("memory", "1Ti"),
        ("memory", "500Mi"),
        ("memory", "12345"),
        ("pods", "110"),
    ],
)
def test_format_round_trips_exact_quantities(resource: str, text: str) -> None:
    units = to_units(resource, text)
    assert to_units(resource, format_units(resource, units)) == units


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(None, {}, id="none"),
        pytest.param({}, {}, id="empty"),
        pytest.param(
            {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": 2},
            {"cpu": 500, "memory": GI, "nvidia.com/gpu": 2},
            id="mixed",
        ),
        pytest.param({"hugepages-1Gi": "0"}, {"hugepages-1Gi": 0}, id="zero-kept"),
    ],
)
def test_resource_map(raw: dict[str, str | int | float] | None, expected: dict[str, int]) -> None:
    assert resource_map(raw) == expected


def test_resource_map_error_names_resource() -> None:
    with pytest.raises(QuantityError, match="invalid quantity 'x' for memory"):
        resource_map({"cpu": "1", "memory": "x"})


@pytest.mark.parametrize(
    ("total", "other", "sign", "expected"),
    [
        pytest.param({"cpu": 1}, {"cpu": 2, "pods": 1}, 1, {"cpu": 3, "pods": 1}, id="add"),
        pytest.param({"cpu": 3, "pods": 1}, {"cpu": 2}, -1, {"cpu": 1, "pods": 1}, id="subtract"),
        pytest.param({"cpu": 2, "pods": 1}, {"cpu": 2}, -1, {"pods": 1}, id="zero-dropped"),
        pytest.param({}, {"cpu": 0}, 1, {}, id="zero-never-added"),
        pytest.param({}, {"cpu": 2}, -1, {"cpu": -2}, id="negative-kept"),
    ],
)
def test_add_into(
    total: dict[str, int], other: dict[str, int], sign: int, expected: dict[str, int]
) -> None:
    add_into(total, other, sign)
    assert total == expected
