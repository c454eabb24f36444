"""Kueue's API rules for quota specs, on Kueue-shaped data, shared by the REST API, the YAML
importer and the admin console so all three accept and refuse exactly the same things.

Each rule mirrors Kueue's CEL rules and webhooks (``apis/kueue/v1beta2/clusterqueue_types.go``,
``pkg/webhooks/clusterqueue_webhook.go``, ``cohort_webhook.go``). Errors carry the field path
in Kueue's spelling (``spec.resourceGroups[0].flavors[1].resources[0].lendingLimit``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from django.core.exceptions import ValidationError

# Defined in the engine, where pure code uses them; the apps import them from here.
from scheduling.core.fields import FieldError as FieldError
from scheduling.core.fields import errors_to_dict as errors_to_dict
from scheduling.core.quantities import QuantityError, parse_quantity
from scheduling.validators import (
    validate_dns1123_subdomain,
    validate_label_value,
    validate_labels,
    validate_qualified_name,
)

MAX_RESOURCE_GROUPS = 16
MAX_FLAVORS_PER_GROUP = 64
MAX_RESOURCES_PER_GROUP = 64
# Totals across all resource groups of one queue (pkg/webhooks/clusterqueue_webhook.go).
MAX_TOTAL_FLAVORS = 256
MAX_TOTAL_COVERED_RESOURCES = 256
MAX_FLAVOR_RESOURCES_PER_GROUP = 512


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
    enforce_lending_limit: bool = True,
) -> list[FieldError]:
    """Check ``resourceGroups`` of a ClusterQueue (``has_parent``: it has a cohort) or of a
    Cohort (``has_parent``: it has a parent cohort).

    Rules: every flavor lists exactly the group's covered resources in the same order; a
    resource and a flavor belong to one group only; quantities are valid and non-negative;
    ``borrowingLimit`` and ``lendingLimit`` need a cohort (a parent, for a Cohort);
    ``lendingLimit`` ≤ ``nominalQuota`` (ClusterQueues only: Kueue's cohort webhook passes
    ``enforce_lending_limit=False``); at most 256 flavors and 256 covered resources in all
    and 512 flavor/resource pairs per group; named flavors exist when ``known_flavors`` is
    given.
    """
    errors: list[FieldError] = []
    if groups is None:
        return errors
    if not isinstance(groups, list):
        return [FieldError(path, "must be a list of resource groups")]
    if len(groups) > MAX_RESOURCE_GROUPS:
        errors.append(FieldError(path, f"must have at most {MAX_RESOURCE_GROUPS} items"))
    errors.extend(_validate_totals(groups, path))
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
                enforce_lending_limit=enforce_lending_limit,
            ))
    return errors


def _validate_totals(groups: list[Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    total_flavors = total_covered = 0
    for g, group in enumerate(groups):
        if not isinstance(group, Mapping):
            continue
        raw_flavors = group.get("flavors")
        flavors: list[Any] = raw_flavors if isinstance(raw_flavors, list) else []
        covered = group.get("coveredResources")
        total_flavors += len(flavors)
        total_covered += len(covered) if isinstance(covered, list) else 0
        pairs = 0
        for flavor in flavors:
            resources = flavor.get("resources") if isinstance(flavor, Mapping) else None
            pairs += len(resources) if isinstance(resources, list) else 0
        if pairs > MAX_FLAVOR_RESOURCES_PER_GROUP:
            errors.append(FieldError(
                f"{path}[{g}]",
                f"number of flavor-resource combinations in a resourceGroup must be "
                f"≤ {MAX_FLAVOR_RESOURCES_PER_GROUP}, got {pairs}",
            ))
    if total_flavors > MAX_TOTAL_FLAVORS:
        errors.append(FieldError(path, f"total number of flavors across all resourceGroups must "
                                       f"be ≤ {MAX_TOTAL_FLAVORS}, got {total_flavors}"))
    if total_covered > MAX_TOTAL_COVERED_RESOURCES:
        errors.append(FieldError(path, f"total number of covered resources across all "
                                       f"resourceGroups must be ≤ {MAX_TOTAL_COVERED_RESOURCES}, "
                                       f"got {total_covered}"))
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
    enforce_lending_limit: bool = True,
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
            elif (limit == "lendingLimit" and enforce_lending_limit and value is not None
                  and nominal is not None and value > nominal):
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


LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def validate_label_selector(selector: Any, path: str) -> list[FieldError]:
    """A Kubernetes LabelSelector (``matchLabels``, ``matchExpressions``), as
    ``metav1validation.ValidateLabelSelector`` checks it; ``None`` and ``{}`` are valid."""
    if selector is None:
        return []
    if not isinstance(selector, Mapping):
        return [FieldError(path, "must be a label selector object (matchLabels, matchExpressions)")]
    errors: list[FieldError] = []
    for key in selector:
        if key not in ("matchLabels", "matchExpressions"):
            errors.append(FieldError(f"{path}.{key}", f'unknown field "{key}"'))
    labels = selector.get("matchLabels")
    if labels is not None:
        try:
            validate_labels(labels)
        except ValidationError as exc:
            errors.append(FieldError(f"{path}.matchLabels", exc.messages[0]))
    expressions = selector.get("matchExpressions")
    if expressions is None:
        return errors
    if not isinstance(expressions, list):
        return [*errors, FieldError(f"{path}.matchExpressions", "must be a list")]
    for i, expression in enumerate(expressions):
        epath = f"{path}.matchExpressions[{i}]"
        if not isinstance(expression, Mapping):
            errors.append(FieldError(epath, "must be an object with key, operator and values"))
            continue
        for key in expression:
            if key not in ("key", "operator", "values"):
                errors.append(FieldError(f"{epath}.{key}", f'unknown field "{key}"'))
        try:
            validate_qualified_name(expression.get("key"))  # type: ignore[arg-type]
        except ValidationError as exc:
            errors.append(FieldError(f"{epath}.key", exc.messages[0]))
        operator = expression.get("operator")
        values = expression.get("values")
        if values is not None and not (
            isinstance(values, list) and all(isinstance(v, str) for v in values)
        ):
            errors.append(FieldError(f"{epath}.values", "must be a list of strings"))
            continue
        if operator in ("In", "NotIn"):
            if not values:
                errors.append(FieldError(
                    f"{epath}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                errors.append(FieldError(
                    f"{epath}.values",
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        else:
            errors.append(FieldError(
                f"{epath}.operator",
                f"Unsupported value: {operator!r}: supported values: "
                + ", ".join(f'"{o}"' for o in LABEL_SELECTOR_OPERATORS),
            ))
        for v, value in enumerate(values or []):
            try:
                validate_label_value(value)
            except ValidationError as exc:
                errors.append(FieldError(f"{epath}.values[{v}]", exc.messages[0]))
    return errors


def validate_admission_check_flavors(
    checks: Sequence[Mapping[str, Any]], flavors: Sequence[str], path: str
) -> list[FieldError]:
    """``onFlavors`` may only name flavors of the queue's own resource groups (Kueue's
    ClusterQueue webhook, ``validateAdmissionCheckOnFlavors``)."""
    errors: list[FieldError] = []
    allowed = set(flavors)
    supported = ", ".join(f'"{name}"' for name in flavors)
    for i, check in enumerate(checks):
        for j, flavor in enumerate(check.get("onFlavors") or ()):
            if flavor not in allowed:
                detail = (f"supported values: {supported}" if supported
                          else "the ClusterQueue has no flavors in its resourceGroups")
                errors.append(FieldError(f"{path}[{i}].onFlavors[{j}]",
                                         f'Unsupported value: "{flavor}": {detail}'))
    return errors
