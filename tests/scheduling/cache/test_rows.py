"""Rows read with cheaper JSON conversions are the rows ``values()`` reads."""

from __future__ import annotations

import pytest

from scheduling.cache import rows, snapshots
from scheduling.models import Workload

pytestmark = pytest.mark.django_db


def test_rows_are_values_rows_value_for_value(manager, make_queue, make_workload) -> None:
    make_queue("cq", {"cpu": "4"})
    make_workload("a", "lq-cq", {"cpu": "1"})
    make_workload("b", "lq-cq", {"cpu": "2"}, count=2)
    Workload.objects.filter(name="b").update(
        labels={"team": "x", "ünï": 'q"uote'}, reclaimable_pods=[{"name": "main", "count": 1}],
        scheduler_state={}, annotations={"a": None}, conditions=[])
    fields = [*snapshots.WORKLOAD_FIELDS, "annotations", "pod_sets_hash"]
    queryset = Workload.objects.filter(cluster_id=manager.pk).order_by("name")

    read = rows.values_rows(queryset, fields)

    expected = list(queryset.values(*fields))
    assert read == expected
    assert [type(v) for row in read for v in row.values()] == [
        type(v) for row in expected for v in row.values()]
    assert read[1]["labels"] == {"team": "x", "ünï": 'q"uote'}
    # Empty documents are separate objects, as the decoder makes them.
    assert read[0]["scheduler_state"] is not read[1]["scheduler_state"]
    assert rows.values_rows(queryset.filter(pk__in=[]), fields) == []


def test_text_that_is_not_json_is_kept_as_it_is() -> None:
    assert rows._json_value("{not json") == "{not json"
    assert rows._json_value(None) is None
    assert rows._json_value("null") is None
    assert rows._json_value('{"a": [1, 2.5]}') == {"a": [1, 2.5]}
