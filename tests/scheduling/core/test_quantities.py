"""Kubernetes quantities parsed exactly, and formatted as Kueue's messages print them."""

from __future__ import annotations

from fractions import Fraction

import pytest

from scheduling.core.quantities import (
    QuantityError,
    format_amount,
    parse_quantity,
    quantity_to_int,
)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("1", Fraction(1), id="plain-integer"),
        pytest.param("500m", Fraction(1, 2), id="milli-suffix"),
        pytest.param("1.5", Fraction(3, 2), id="decimal-point"),
        pytest.param("1Gi", Fraction(2**30), id="binary-suffix"),
        pytest.param("1k", Fraction(1000), id="decimal-suffix"),
        pytest.param("1e3", Fraction(1000), id="exponent"),
        pytest.param(3, Fraction(3), id="yaml-int"),
    ],
)
def test_parses_quantities_exactly(text: str | int, want: Fraction) -> None:
    assert parse_quantity(text) == want


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("abc", id="not-a-number"),
        pytest.param("-1", id="negative"),
        pytest.param("1Xi", id="unknown-suffix"),
        pytest.param("", id="empty"),
    ],
)
def test_rejects_invalid_quantities(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("resource", "text", "want"),
    [
        pytest.param("cpu", "1", 1000, id="cpu-counted-in-millis"),
        pytest.param("cpu", "1.5", 1500, id="cpu-fraction"),
        pytest.param("cpu", "0.0001", 1, id="cpu-rounds-up-like-milli-value"),
        pytest.param("memory", "1Mi", 2**20, id="memory-in-bytes"),
        pytest.param("memory", "1.5", 2, id="memory-rounds-up"),
        pytest.param("example.com/gpu", "3", 3, id="extended-resource-units"),
    ],
)
def test_converts_to_the_integer_kueue_charges(resource: str, text: str, want: int) -> None:
    assert quantity_to_int(resource, text) == want


@pytest.mark.parametrize(
    ("resource", "amount", "want"),
    [
        pytest.param("cpu", 2000, "2", id="cpu-whole-cores"),
        pytest.param("cpu", 500, "500m", id="cpu-millis"),
        pytest.param("cpu", 1_000_000, "1k", id="cpu-thousand-cores"),
        pytest.param("memory", 2**30, "1Gi", id="memory-binary"),
        pytest.param("memory", 1000, "1k", id="memory-below-1024-is-decimal"),
        pytest.param("memory", 2000, "2000", id="memory-not-a-1024-multiple"),
        pytest.param("example.com/gpu", 20, "20", id="units"),
        pytest.param("pods", 5000, "5k", id="units-decimal-suffix"),
    ],
)
def test_formats_amounts_like_kubernetes(resource: str, amount: int, want: str) -> None:
    assert format_amount(resource, amount) == want


def test_cached_charge_still_refuses_what_is_not_a_quantity() -> None:
    # Charges are cached: a bool must not hit the entry of 1, nor a list break the cache.
    assert quantity_to_int("pods", 1) == 1
    with pytest.raises(QuantityError, match="not True"):
        quantity_to_int("pods", True)
    with pytest.raises(QuantityError, match="not list"):
        quantity_to_int("cpu", ["1"])  # type: ignore[arg-type]
    with pytest.raises(QuantityError, match="not a valid quantity"):
        quantity_to_int("cpu", "1x")
