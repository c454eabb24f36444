"""Kubernetes resource quantities ("500m", "1Gi", "1e3"), parsed exactly.

Kueue counts every resource as an integer: CPU in millicores and everything else in base
units, rounding fractions up as ``resource.Quantity.MilliValue()`` / ``Value()`` do
(``pkg/resources/resource.go``). Parsing goes through ``Fraction`` so no precision is lost
before that final rounding.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

__all__ = [
    "QuantityError",
    "format_amount",
    "format_quantity",
    "parse_quantity",
    "quantity_to_int",
    "int_to_quantity",
    "is_milli_resource",
]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# <sign><digits>[.<digits>] followed by a binary suffix, a decimal suffix or an exponent.
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<decimal>[numkMGTPE]?))$"
)
# Resources Kueue counts in thousandths (resource.Quantity.MilliValue()).
_MILLI_RESOURCES = frozenset({"cpu"})


class QuantityError(ValueError):
    """A string that is not a valid Kubernetes quantity."""


def parse_quantity(text: str | int | float, *, allow_negative: bool = False) -> Fraction:
    """Parse a Kubernetes quantity into an exact fraction of base units.

    Raises QuantityError with a message fit for an API field error when ``text`` is not a
    quantity, or is negative while ``allow_negative`` is false.

    Cached: every cycle, status and scrape charges each workload holding quota again, and
    a domain uses a handful of distinct quantities (``typed``: ``True`` is not taken for
    ``1``; input that cannot be a cache key, such as a list from hostile JSON, is parsed,
    and refused, uncached).
    """
    if isinstance(text, (str, int, float)):
        return _parse_cached(text, allow_negative)
    return _parse(text, allow_negative)


@functools.lru_cache(maxsize=4096, typed=True)
def _parse_cached(text: str | int | float, allow_negative: bool) -> Fraction:
    return _parse(text, allow_negative)


def _parse(text: str | int | float, allow_negative: bool) -> Fraction:
    if isinstance(text, bool):
        raise QuantityError(f"quantities must be strings or numbers, not {text!r}")
    if isinstance(text, int):
        text = str(text)
    elif isinstance(text, float):
        if not math.isfinite(text):
            raise QuantityError(f"{text!r} is not a valid quantity")
        text = repr(text)
    if not isinstance(text, str):
        raise QuantityError(f"quantities must be strings or numbers, not {type(text).__name__}")
    stripped = text.strip()
    match = _QUANTITY.match(stripped)
    if not match or len(stripped) > 64:
        raise QuantityError(
            f"{text!r} is not a valid quantity: expected a number with an optional suffix "
            "such as 500m, 2, 1.5, 4Gi or 1e3"
        )
    value = Fraction(match["number"])
    if match["binary"]:
        value *= _BINARY[match["binary"]]
    elif match["exp"]:
        exponent = int(match["exp"][1:])
        if abs(exponent) > 30:
            raise QuantityError(f"{text!r} is not a valid quantity: exponent out of range")
        value *= Fraction(10) ** exponent
    else:
        value *= _DECIMAL[match["decimal"] or ""]
    if value < 0 and not allow_negative:
        raise QuantityError(f"{text!r} must not be negative")
    return value


def is_milli_resource(resource: str) -> bool:
    """True for resources Kueue accounts in thousandths (CPU)."""
    return resource in _MILLI_RESOURCES


def quantity_to_int(resource: str, text: str | int | float) -> int:
    """The integer Kueue charges for ``text`` of ``resource``: millis for CPU, else units.

    Fractions round up, as Kubernetes' MilliValue()/Value() do.
    """
    value = parse_quantity(text)
    if is_milli_resource(resource):
        value *= 1000
    return math.ceil(value)


def int_to_quantity(resource: str, amount: int) -> str:
    """Format an integer amount of ``resource`` (as counted by quantity_to_int) as a quantity."""
    if is_milli_resource(resource):
        if amount % 1000 == 0:
            return str(amount // 1000)
        return f"{amount}m"
    return format_quantity(Fraction(amount))


def format_quantity(value: Fraction) -> str:
    """Canonical text for an amount of base units: binary suffixes when exact, else decimal."""
    if value.denominator != 1:
        milli = value * 1000
        if milli.denominator == 1:
            return f"{milli.numerator}m"
        return str(float(value))
    number = value.numerator
    if number == 0:
        return "0"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        factor = _BINARY[suffix]
        if number % factor == 0 and abs(number) >= factor:
            return f"{number // factor}{suffix}"
    return str(number)


# Resources Kubernetes formats with binary suffixes (Kueue's ResourceFormatter).
_BINARY_FORMATTED = frozenset({"memory", "ephemeral-storage"})
_DECIMAL_SUFFIXES = ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"))


def _decimal_canonical(number: int) -> str:
    for exponent, suffix in _DECIMAL_SUFFIXES:
        factor = 10**exponent
        if number % factor == 0 and abs(number) >= factor:
            return f"{number // factor}{suffix}"
    return str(number)


def format_amount(resource: str, amount: int) -> str:
    """Format an engine amount the way Kubernetes prints the quantity in Kueue's messages.

    CPU is a milli quantity ("500m", "2"); memory, ephemeral storage and hugepages use
    binary suffixes when exact ("1Gi") and every other resource decimal ones ("1k").
    """
    if is_milli_resource(resource):
        if amount % 1000 == 0:
            return _decimal_canonical(amount // 1000)
        return f"{amount}m"
    if resource in _BINARY_FORMATTED or resource.startswith("hugepages-"):
        if -1024 < amount < 1024:
            return _decimal_canonical(amount)
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            factor = _BINARY[suffix]
            if amount % factor == 0:
                return f"{amount // factor}{suffix}"
        return str(amount)
    return _decimal_canonical(amount)
