"""JSON merge patch: the examples of RFC 7386, appendix A, and what a caller may rely on."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.core.patch import merge_patch, merge_patch_from


@pytest.mark.parametrize(("target", "patch", "result"), [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
])
def test_rfc_7386_examples(target: Any, patch: Any, result: Any) -> None:
    assert merge_patch(target, patch) == result


def test_neither_argument_is_changed_and_the_result_shares_nothing_with_the_patch() -> None:
    target = {"spec": {"parallelism": 2, "template": {"containers": [{"name": "a"}]}}}
    patch = {"spec": {"parallelism": 3, "template": {"containers": [{"name": "b"}]}}}
    merged = merge_patch(target, patch)
    merged["spec"]["template"]["containers"][0]["name"] = "edited"
    assert patch == {"spec": {"parallelism": 3, "template": {"containers": [{"name": "b"}]}}}
    assert target == {"spec": {"parallelism": 2, "template": {"containers": [{"name": "a"}]}}}


def test_the_patch_between_two_objects_sends_only_what_changed() -> None:
    running = {"spec": {"suspend": False, "parallelism": 2, "template": {
        "metadata": {"labels": {"app": "a", "kueue.x-k8s.io/podset": "main"}},
        "spec": {"nodeSelector": {"instance-type": "spot"}, "containers": [{"name": "c"}],
                 "tolerations": [{"key": "spot"}]}}}}
    restored = {"spec": {"suspend": True, "parallelism": 2, "template": {
        "metadata": {"labels": {"app": "a"}},
        "spec": {"containers": [{"name": "c"}], "tolerations": []}}}}

    patch = merge_patch_from(running, restored)

    assert patch == {"spec": {"suspend": True, "template": {
        "metadata": {"labels": {"kueue.x-k8s.io/podset": None}},
        "spec": {"nodeSelector": None, "tolerations": []}}}}
    assert merge_patch(running, patch) == restored
    assert merge_patch_from(restored, restored) == {}
