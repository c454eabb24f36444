"""Kueue's API rules for quota specs, on Kueue-shaped data, shared by the REST API, the YAML
importer and the admin console so all three accept and refuse exactly the same things.

Each rule mirrors Kueue's CEL rules and webhooks (``apis/kueue/v1beta2/clusterqueue_types.go``,
``pkg/webhooks/clusterqueue_webhook.go``, ``cohort_webhook.go``). Errors carry the field path
in Kueue's spelling (``spec.resourceGroups[0].flavors[1].resources[0].lendingLimit``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from django.core.exceptions import ValidationError

from scheduling.core.quantities import QuantityError, parse_quantity
from scheduling.validators import validate_dns1123_subdomain, validate_qualified_name

MAX_RESOURCE_GROUPS = 16
MAX_FLAVORS_PER_GROUP = 64
MAX_RESOURCES_PER_GROUP = 64


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str


def errors_to_dict(errors: Iterable[FieldError]) -> dict[str, list[str]]:
    """Group errors by path, the shape DRF and ValidationError(dict) use."""
    result: dict[str, list[str]] = {}
    for error in errors:
        result.setdefault(error.path, []).append(error.message)
    return result


def _quantity(value: Any, path: str, errors: list[FieldError]) -> Fraction | None:
    try:
        return parse_quantity(value)
    except QuantityError as exc:
        errors.append(FieldError(path, str(exc)))
        return None


def validate_resource_groups(
    groups: Any,
    *,
    has_parent: bool,
    known_flavors: set[str] | None = None,
    path: str = "spec.resourceGroups",
    parent_field: str = "cohort",
) -> list[FieldError]:
    """Check ``resourceGroups`` of a ClusterQueue (``has_parent``: it has a cohort) or of a
    Cohort (``has_parent``: it has a parent cohort).

    Rules: every flavor lists exactly the group's covered resources in the same order; a
    resource and a flavor belong to one group only; quantities are valid and non-negative;
    ``borrowingLimit`` and ``lendingLimit`` need a cohort (a parent, for a Cohort);
    ``lendingLimit`` ≤ ``nominalQuota``; named flavors exist when ``known_flavors`` is given.
    """
    errors: list[FieldError] = []
    if groups is None:
        return errors
    if not isinstance(groups, list):
        return [FieldError(path, "must be a list of resource groups")]
    if len(groups) > MAX_RESOURCE_GROUPS:
        errors.append(FieldError(path, f"must have at most {MAX_RESOURCE_GROUPS} items"))
    seen_resources: dict[str, int] = {}
    seen_flavors: dict[str, int] = {}
    for g, group in enumerate(groups):
        gpath = f"{path}[{g}]"
        if not isinstance(group, Mapping):
            errors.append(FieldError(gpath, "must be an object with coveredResources and flavors"))
            continue
        covered = group.get("coveredResources")
        if not isinstance(covered, list) or not covered:
            errors.append(FieldError(f"{gpath}.coveredResources", "must list at least one resource"))
            covered = []
        elif len(covered) > MAX_RESOURCES_PER_GROUP:
            errors.append(FieldError(f"{gpath}.coveredResources",
                                     f"must have at most {MAX_RESOURCES_PER_GROUP} items"))
        for r, resource in enumerate(covered):
            rpath = f"{gpath}.coveredResources[{r}]"
            try:
                validate_qualified_name(resource)
            except ValidationError as exc:
                errors.append(FieldError(rpath, exc.messages[0]))
                continue
            if resource in seen_resources:
                other = seen_resources[resource]
                message = (f"resource {resource!r} is already covered by resource group {other}"
                           if other != g else f"duplicate resource {resource!r}")
                errors.append(FieldError(rpath, message))
            else:
                seen_resources[resource] = g
        flavors = group.get("flavors")
        if not isinstance(flavors, list) or not flavors:
            errors.append(FieldError(f"{gpath}.flavors", "must list at least one flavor"))
            continue
        if len(flavors) > MAX_FLAVORS_PER_GROUP:
            errors.append(FieldError(f"{gpath}.flavors",
                                     f"must have at most {MAX_FLAVORS_PER_GROUP} items"))
        for f, flavor in enumerate(flavors):
            errors.extend(_validate_flavor_quotas(
                flavor, f"{gpath}.flavors[{f}]", covered, g, seen_flavors,
                has_parent=has_parent, known_flavors=known_flavors, parent_field=parent_field,
            ))
    return errors


def _validate_flavor_quotas(
    flavor: Any,
    fpath: str,
    covered: Sequence[str],
    group_index: int,
    seen_flavors: dict[str, int],
    *,
    has_parent: bool,
    known_flavors: set[str] | None,
    parent_field: str,
) -> list[FieldError]:
    errors: list[FieldError] = []
    if not isinstance(flavor, Mapping):
        return [FieldError(fpath, "must be an object with name and resources")]
    name = flavor.get("name")
    if not isinstance(name, str):
        errors.append(FieldError(f"{fpath}.name", "is required"))
    else:
        try:
            validate_dns1123_subdomain(name)
        except ValidationError as exc:
            errors.append(FieldError(f"{fpath}.name", exc.messages[0]))
        if name in seen_flavors:
            errors.append(FieldError(f"{fpath}.name",
                                     f"flavor {name!r} appears more than once in resourceGroups"))
        else:
            seen_flavors[name] = group_index
        if known_flavors is not None and name not in known_flavors:
            errors.append(FieldError(f"{fpath}.name", f"ResourceFlavor {name!r} does not exist"))
    resources = flavor.get("resources")
    if not isinstance(resources, list):
        return [*errors, FieldError(f"{fpath}.resources", "must be a list")]
    names = [r.get("name") if isinstance(r, Mapping) else None for r in resources]
    if list(names) != list(covered):
        errors.append(FieldError(
            f"{fpath}.resources",
            f"must list exactly the covered resources {list(covered)} in the same order, "
            f"got {names}",
        ))
    for r, resource in enumerate(resources):
        rpath = f"{fpath}.resources[{r}]"
        if not isinstance(resource, Mapping):
            errors.append(FieldError(rpath, "must be an object"))
            continue
        if "nominalQuota" not in resource or resource.get("nominalQuota") is None:
            errors.append(FieldError(f"{rpath}.nominalQuota", "is required"))
            nominal = None
        else:
            nominal = _quantity(resource["nominalQuota"], f"{rpath}.nominalQuota", errors)
        for limit in ("borrowingLimit", "lendingLimit"):
            if resource.get(limit) is None:
                continue
            value = _quantity(resource[limit], f"{rpath}.{limit}", errors)
            if not has_parent:
                errors.append(FieldError(f"{rpath}.{limit}",
                                         f"must be nil when {parent_field} is empty"))
            elif (limit == "lendingLimit" and value is not None and nominal is not None
                  and value > nominal):
                errors.append(FieldError(f"{rpath}.lendingLimit",
                                         "must be less than or equal to the nominalQuota"))
    return errors


def resource_groups_from_rows(rows: Iterable[Any]) -> list[dict[str, Any]]:
    """Kueue's nested ``resourceGroups`` from FlavorQuota rows (ordered by group, position)."""
    groups: dict[int, dict[str, Any]] = {}
    flavor_entries: dict[tuple[int, str], dict[str, Any]] = {}
    for row in sorted(rows, key=lambda q: (q.resource_group, q.position, q.pk or 0)):
        group = groups.setdefault(row.resource_group, {"coveredResources": [], "flavors": []})
        if row.resource not in group["coveredResources"]:
            group["coveredResources"].append(row.resource)
        key = (row.resource_group, row.flavor.name)
        entry = flavor_entries.get(key)
        if entry is None:
            entry = {"name": row.flavor.name, "resources": []}
            flavor_entries[key] = entry
            group["flavors"].append(entry)
        quota: dict[str, Any] = {"name": row.resource, "nominalQuota": row.nominal_quota}
        if row.borrowing_limit is not None:
            quota["borrowingLimit"] = row.borrowing_limit
        if row.lending_limit is not None:
            quota["lendingLimit"] = row.lending_limit
        entry["resources"].append(quota)
    return [groups[index] for index in sorted(groups)]


def rows_from_resource_groups(groups: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """FlavorQuota field values (flavor by name) for validated ``resourceGroups``."""
    rows: list[dict[str, Any]] = []
    position = 0
    for g, group in enumerate(groups):
        for flavor in group["flavors"]:
            for resource in flavor["resources"]:
                rows.append({
                    "resource_group": g,
                    "position": position,
                    "flavor_name": flavor["name"],
                    "resource": resource["name"],
                    "nominal_quota": str(resource["nominalQuota"]),
                    "borrowing_limit": _optional_str(resource.get("borrowingLimit")),
                    "lending_limit": _optional_str(resource.get("lendingLimit")),
                })
                position += 1
    return rows


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def cohort_cycle(name: str, parent: str | None, parents: Mapping[str, str | None]) -> list[str]:
    """The cycle that giving cohort ``name`` the parent ``parent`` would close, or [].

    ``parents`` maps every other cohort of the domain to its parent name.
    """
    chain = [name]
    current = parent
    seen = {name}
    while current is not None:
        chain.append(current)
        if current in seen:
            return chain
        seen.add(current)
        current = parents.get(current)
    return []


def validate_fungibility(flavor_fungibility: Mapping[str, Any] | None, path: str) -> list[FieldError]:
    """``preference`` may only be set when both ``when*`` policies are TryNextFlavor."""
    if not flavor_fungibility or not flavor_fungibility.get("preference"):
        return []
    if (flavor_fungibility.get("whenCanBorrow") != "TryNextFlavor"
            or flavor_fungibility.get("whenCanPreempt") != "TryNextFlavor"):
        return [FieldError(f"{path}.preference",
                           "may only be set when whenCanBorrow and whenCanPreempt are TryNextFlavor")]
    return []


def validate_preemption(preemption: Mapping[str, Any] | None, path: str) -> list[FieldError]:
    """``reclaimWithinCohort: Never`` cannot be combined with a borrowWithinCohort policy."""
    if not preemption:
        return []
    borrow = preemption.get("borrowWithinCohort") or {}
    if (preemption.get("reclaimWithinCohort", "Never") == "Never"
            and borrow.get("policy", "Never") != "Never"):
        return [FieldError(f"{path}.borrowWithinCohort.policy",
                           "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never")]
    return []


def validate_fair_sharing_weight(weight: Any, path: str) -> list[FieldError]:
    """0 is allowed (infinite share); otherwise the weight must be more than 1e-9."""
    if weight is None:
        return []
    errors: list[FieldError] = []
    value = _quantity(weight, path, errors)
    if value is not None and value != 0 and value <= Fraction(1, 10**9):
        errors.append(FieldError(path, "must be 0 or greater than 1e-9"))
    return errors
