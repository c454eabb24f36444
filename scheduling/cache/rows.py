"""``values()`` rows read with cheaper JSON conversions.

The admission cycle loads a thousand workload rows or more per call, each with about ten
JSON columns, most of them an empty object or list. Through ``QuerySet.values()`` each
value goes through ``JSONField.from_db_value`` (a call, a type check, ``json.loads`` with
its keyword handling); here the same conversion is one dictionary lookup for the empty
documents and the decoder itself for the others. Every other column keeps the ORM's own
converters, and the rows are what ``values()`` gives, value for value
(``tests/scheduling/cache/test_rows.py`` compares them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from django.db import models
from django.db.models.fields.json import KeyTransform
from django.db.models.sql.constants import MULTI

_DECODE = json.JSONDecoder().decode
# The empty documents, each made anew for every value (rows are separate objects).
_EMPTY: dict[str, Callable[[], Any]] = {"{}": dict, "[]": list}


def _json_value(value: Any) -> Any:
    """``JSONField.from_db_value`` of a column of a field without a custom decoder."""
    if value is None:
        return None
    try:
        if type(value) is str:
            empty = _EMPTY.get(value)
            return empty() if empty is not None else _DECODE(value)
        return json.loads(value)  # bytes, as json.loads reads them
    except json.JSONDecodeError:
        return value


def values_rows(queryset: models.QuerySet[Any], fields: Sequence[str]) -> list[dict[str, Any]]:
    """``list(queryset.values(*fields))``, with JSON columns converted by ``_json_value``."""
    query = queryset.values(*fields).query
    compiler = query.get_compiler(queryset.db)
    names = list(query.selected) if query.selected else [
        *query.extra_select, *query.values_select, *query.annotation_select]
    results = compiler.execute_sql(MULTI)
    selected = [s[0] for s in compiler.select[0:compiler.col_count]]
    connection = compiler.connection
    plan: list[tuple[int, Callable[[Any], Any] | None, list[Any], Any]] = []
    for pos, (convs, expression) in compiler.get_converters(selected).items():
        field = getattr(expression, "output_field", None)
        fast = (isinstance(field, models.JSONField) and field.decoder is None
                and not isinstance(expression, KeyTransform)
                and [getattr(c, "__func__", None) for c in convs]
                == [models.JSONField.from_db_value])
        plan.append((pos, _json_value if fast else None, convs, expression))
    rows: list[dict[str, Any]] = []
    if results is None:
        return rows
    for chunk in results:
        for raw in chunk:
            row = list(raw)
            for pos, fast_convert, convs, expression in plan:
                value = row[pos]
                if fast_convert is not None:
                    value = fast_convert(value)
                else:
                    for convert in convs:
                        value = convert(value, expression, connection)
                row[pos] = value
            rows.append(dict(zip(names, row, strict=True)))
    return rows
