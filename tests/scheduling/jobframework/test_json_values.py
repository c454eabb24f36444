"""Keys and copies of plain JSON values (``jobframework.json_values``)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.jobframework.json_values import NotJson, json_copy, json_key


@pytest.mark.parametrize(("left", "right"), [
    (1, 1.0), (1, True), (0, False), (0.0, -0.0), ("1", 1), (None, "null"),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}),  # key order is kept as written
    ([1, 2], [2, 1]), ([], {}), (["{"], {}), ([{"a": []}], [{"a": {}}]),
])
def test_json_key_tells_apart_values_that_validation_or_storage_tell_apart(
        left: Any, right: Any) -> None:
    assert json_key(left) != json_key(right)


def test_json_key_is_equal_for_equal_json() -> None:
    value = {"name": "main", "count": 2, "template": {"spec": {"containers": [
        {"name": "c", "resources": {"requests": {"cpu": "1.5"}}}]}}, "x": [None, True, 0.5]}
    key = json_key(value)
    assert key == json_key(json_copy(value))
    assert hash(key) == hash(json_key(json_copy(value)))


@pytest.mark.parametrize("value", [(1, 2), {1: "a"}, {"a": {2, 3}}, [b"x"]])
def test_json_key_refuses_what_is_not_plain_json(value: Any) -> None:
    with pytest.raises(NotJson):
        json_key(value)


def test_json_copy_is_equal_and_shares_no_dict_or_list() -> None:
    value = {"a": [1, {"b": "c"}], "d": {}}
    copy = json_copy(value)
    assert copy == value
    copy["a"][1]["b"] = "changed"
    copy["d"]["new"] = 1
    assert value == {"a": [1, {"b": "c"}], "d": {}}
