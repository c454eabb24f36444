"""Resource keys and vectors (Kueue ``pkg/resources/resource.go``).

Quota is tracked per (flavor, resource) pair. A vector is a plain ``dict`` from
``FlavorResource`` to an integer amount: hashing a NamedTuple and adding Python ints is
the cheapest exact representation, and the admission cycle does this millions of times.
Python ints never overflow, so Kueue's saturating ``Amount`` arithmetic is not needed.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "FlavorResource",
    "FlavorResourceQuantities",
    "PODS",
]

# Kueue charges one unit of this resource per pod when a ClusterQueue covers it.
PODS = "pods"


class FlavorResource(NamedTuple):
    """The key of every quota and usage amount."""

    flavor: str
    resource: str

    def __str__(self) -> str:
        return f"{self.resource} in flavor {self.flavor}"


FlavorResourceQuantities = dict[FlavorResource, int]
