"""Cases from Kueue's own tests, beyond the shared conformance set, run through ``simulate``.

Each case reproduces a ``TestSchedule`` / ``TestScheduleForFairSharing`` case or an
integration scenario of Kueue (``pkg/scheduler/scheduler_test.go``,
``scheduler_fs_test.go``, ``test/integration/singlecluster/scheduler``) with the same
fixture, and asserts the same admissions, preemptions and pending workloads.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import (
    doc_admission,
    doc_cluster_queue,
    doc_cohort,
    doc_group,
    doc_pod_set,
    doc_quota,
    doc_scenario,
    doc_workload,
)
from tools.conformance import check_outcome, load_scenario, run_scenario_in_engine

NAMESPACES = {
    "default": {},
    "eng-alpha": {"dep": "eng"},
    "eng-beta": {"dep": "eng"},
    "eng-gamma": {"dep": "eng"},
    "sales": {"dep": "sales"},
    "lend": {"dep": "lend"},
}


def _cpu(flavor: str, nominal: str | int, bl: str | int | None = None, ll: str | int | None = None):
    return (flavor, [doc_quota("cpu", nominal, bl, ll)])


def _res(flavor: str, resource: str, nominal: str | int, bl: str | int | None = None):
    return (flavor, [doc_quota(resource, nominal, bl)])


def schedule_fixture(
    *,
    extra_cqs: list[dict[str, Any]] | None = None,
    extra_lqs: list[tuple[str, str, str]] | None = None,
    cohorts: list[dict[str, Any]] | None = None,
    admitted: list[dict[str, Any]] | None = None,
    pending: list[dict[str, Any]] | None = None,
    fair_sharing: bool = False,
    partial_admission: bool = True,
) -> dict[str, Any]:
    """The cluster of Kueue's TestSchedule and TestScheduleForFairSharing."""
    cqs = [
        doc_cluster_queue(
            "sales", doc_group(_cpu("default", 50)), strategy="StrictFIFO", namespace_label="sales"
        ),
        doc_cluster_queue(
            "eng-alpha",
            doc_group(_cpu("on-demand", 50, 50), _cpu("spot", 100, 0)),
            cohort="eng",
            strategy="StrictFIFO",
            namespace_label="eng",
        ),
        doc_cluster_queue(
            "eng-beta",
            doc_group(_cpu("on-demand", 50, 10), _cpu("spot", 0, 100)),
            doc_group(_res("model-a", "example.com/gpu", 20, 0)),
            cohort="eng",
            strategy="StrictFIFO",
            namespace_label="eng",
            reclaim="Any",
            within="LowerPriority",
        ),
        doc_cluster_queue(
            "flavor-nonexistent-cq",
            doc_group(_cpu("nonexistent-flavor", 50)),
            strategy="StrictFIFO",
        ),
        doc_cluster_queue(
            "lend-a", doc_group(_cpu("default", 3, None, 2)), cohort="lend", namespace_label="lend"
        ),
        doc_cluster_queue(
            "lend-b", doc_group(_cpu("default", 2, None, 2)), cohort="lend", namespace_label="lend"
        ),
        *(extra_cqs or []),
    ]
    lqs = [
        ("sales", "main", "sales"),
        ("sales", "blocked", "eng-alpha"),
        ("eng-alpha", "main", "eng-alpha"),
        ("eng-beta", "main", "eng-beta"),
        ("sales", "flavor-nonexistent-queue", "flavor-nonexistent-cq"),
        ("sales", "cq-nonexistent-queue", "nonexistent-cq"),
        ("lend", "lend-a-queue", "lend-a"),
        ("lend", "lend-b-queue", "lend-b"),
        *(extra_lqs or []),
    ]
    return doc_scenario(
        cluster_queues=cqs,
        local_queues=lqs,
        flavors=["default", "on-demand", "spot", "model-a", "gpu-unused"],
        cohorts=cohorts or [],
        admitted=admitted or [],
        pending=pending or [],
        namespaces=NAMESPACES,
        fair_sharing=fair_sharing,
        partial_admission=partial_admission,
    )


def expect(
    admitted: dict[str, dict[str, Any]] | None = None,
    preempted: tuple[str, ...] = (),
    pending: tuple[str, ...] = (),
) -> dict[str, Any]:
    return {"admitted": admitted or {}, "preempted": sorted(preempted), "pending": sorted(pending)}


W = doc_workload
P = doc_pod_set
A = doc_admission


def _other_alpha_beta(q1: int, q2: int, **kw: Any) -> list[dict[str, Any]]:
    return [
        doc_cluster_queue(
            "other-alpha",
            doc_group(_cpu("default", q1)),
            cohort="other",
            within="LowerPriority",
            **kw,
        ),
        doc_cluster_queue(
            "other-beta",
            doc_group(_cpu("default", q2)),
            cohort="other",
            within="LowerPriority",
            **kw,
        ),
    ]


OTHER_LQS = [("eng-alpha", "other", "other-alpha"), ("eng-beta", "other", "other-beta")]


def _three_cqs() -> list[dict[str, Any]]:
    return [
        doc_cluster_queue(
            f"cq{i}",
            doc_group(("default", [doc_quota("r1", 10, 10), doc_quota("r2", 10, 10)])),
            cohort="co",
            reclaim="Any",
            within="LowerPriority",
        )
        for i in (1, 2, 3)
    ]


THREE_LQS = [("sales", f"lq{i}", f"cq{i}") for i in (1, 2, 3)]


CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "single-cluster-queue-full",
        schedule_fixture(
            pending=[W("new", "sales", "main", pod_sets=[P("one", 11, cpu=1)])],
            admitted=[
                W(
                    "assigned",
                    "sales",
                    pod_sets=[P("one", 40, cpu=1)],
                    admission=("sales", {"cpu": "default"}),
                )
            ],
        ),
        expect(pending=("sales/new",)),
    ),
    (
        "admit-in-same-cohort-with-no-borrowing",
        schedule_fixture(
            pending=[
                W("new", "eng-alpha", "main", pod_sets=[P("one", 40, cpu=1)]),
                W("new", "eng-beta", "main", pod_sets=[P("one", 40, cpu=1)]),
            ]
        ),
        expect(
            {
                "eng-alpha/new": A("eng-alpha", ("one", {"cpu": "on-demand"}, 40)),
                "eng-beta/new": A("eng-beta", ("one", {"cpu": "on-demand"}, 40)),
            }
        ),
    ),
    (
        "cannot-borrow-if-cohort-was-assigned-and-would-overadmit",
        schedule_fixture(
            pending=[
                W("new", "eng-alpha", "main", pod_sets=[P("one", 45, cpu=1)]),
                W("new", "eng-beta", "main", pod_sets=[P("one", 56, cpu=1)]),
            ]
        ),
        expect(
            {"eng-alpha/new": A("eng-alpha", ("one", {"cpu": "on-demand"}, 45))},
            pending=("eng-beta/new",),
        ),
    ),
    (
        "can-borrow-if-cohort-was-assigned-and-will-not-overadmit",
        schedule_fixture(
            pending=[
                W("new", "eng-alpha", "main", pod_sets=[P("one", 45, cpu=1)]),
                W("new", "eng-beta", "main", pod_sets=[P("one", 55, cpu=1)]),
            ]
        ),
        expect(
            {
                "eng-alpha/new": A("eng-alpha", ("one", {"cpu": "on-demand"}, 45)),
                "eng-beta/new": A("eng-beta", ("one", {"cpu": "on-demand"}, 55)),
            }
        ),
    ),
    (
        "can-borrow-if-needs-reclaim-from-cohort-in-different-flavor",
        schedule_fixture(
            pending=[
                W("can-reclaim", "eng-alpha", "main", cpu=100),
                W("needs-to-borrow", "eng-beta", "main", cpu=1),
            ],
            admitted=[
                W(
                    "user-on-demand",
                    "eng-beta",
                    cpu=50,
                    admission=("eng-beta", {"cpu": "on-demand"}),
                ),
                W("user-spot", "eng-beta", cpu=1, admission=("eng-beta", {"cpu": "spot"})),
            ],
        ),
        expect(
            {"eng-beta/needs-to-borrow": A("eng-beta", ("main", {"cpu": "on-demand"}, 1))},
            pending=("eng-alpha/can-reclaim",),
        ),
    ),
    (
        "workload-exceeds-lending-limit-when-borrowing-in-cohort",
        schedule_fixture(
            admitted=[W("a", "lend", cpu=2, admission=("lend-b", {"cpu": "default"}))],
            pending=[W("b", "lend", "lend-b-queue", cpu=3)],
        ),
        expect(pending=("lend/b",)),
    ),
    (
        "hierarchical-cohort-allows-borrowing-up-to-lending-limit",
        schedule_fixture(
            cohorts=[doc_cohort("root"), doc_cohort("child", "root")],
            extra_cqs=[
                doc_cluster_queue(
                    "cq-lender",
                    doc_group(_cpu("on-demand", 10, None, 5)),
                    cohort="child",
                    namespace_label="eng",
                ),
                doc_cluster_queue(
                    "cq-borrower",
                    doc_group(_cpu("on-demand", 5, 10)),
                    cohort="child",
                    namespace_label="eng",
                ),
            ],
            extra_lqs=[("eng-alpha", "lq-borrower", "cq-borrower")],
            admitted=[
                W(
                    "wl-existing",
                    "eng-alpha",
                    cpu=5,
                    admission=("cq-borrower", {"cpu": "on-demand"}),
                )
            ],
            pending=[W("wl-borrowing", "eng-alpha", "lq-borrower", cpu=5)],
        ),
        expect({"eng-alpha/wl-borrowing": A("cq-borrower", ("main", {"cpu": "on-demand"}, 1))}),
    ),
    (
        "preempt-workloads-in-cluster-queue-and-cohort",
        schedule_fixture(
            admitted=[
                W("use-all-spot", "eng-alpha", cpu=100, admission=("eng-alpha", {"cpu": "spot"})),
                W(
                    "low-1",
                    "eng-beta",
                    priority=-1,
                    cpu=30,
                    admission=("eng-beta", {"cpu": "on-demand"}),
                ),
                W(
                    "low-2",
                    "eng-beta",
                    priority=-2,
                    cpu=10,
                    admission=("eng-beta", {"cpu": "on-demand"}),
                ),
                W("borrower", "eng-alpha", cpu=60, admission=("eng-alpha", {"cpu": "on-demand"})),
            ],
            pending=[W("preemptor", "eng-beta", "main", uid="wl-preemptor", cpu=20)],
        ),
        expect(preempted=("eng-alpha/borrower", "eng-beta/low-2"), pending=("eng-beta/preemptor",)),
    ),
    (
        "multiple-cluster-queues-need-preemption",
        schedule_fixture(
            extra_cqs=[
                doc_cluster_queue(
                    "other-alpha", doc_group(_cpu("on-demand", 50, 50)), cohort="other"
                ),
                doc_cluster_queue(
                    "other-beta",
                    doc_group(_cpu("on-demand", 50, 10)),
                    cohort="other",
                    reclaim="Any",
                    within="LowerPriority",
                ),
            ],
            extra_lqs=OTHER_LQS,
            admitted=[
                W("use-all", "eng-alpha", cpu=100, admission=("other-alpha", {"cpu": "on-demand"}))
            ],
            pending=[
                W("preemptor", "eng-beta", "other", priority=-1, cpu=1),
                W("pending", "eng-alpha", "other", priority=1, cpu=1),
            ],
        ),
        expect(
            preempted=("eng-alpha/use-all",), pending=("eng-beta/preemptor", "eng-alpha/pending")
        ),
    ),
    (
        "cannot-borrow-resource-not-listed-in-cluster-queue",
        schedule_fixture(pending=[W("new", "eng-alpha", "main", example_com__gpu=1)]),
        expect(pending=("eng-alpha/new",)),
    ),
    (
        "not-enough-resources-to-borrow-falls-back-to-next-flavor",
        schedule_fixture(
            pending=[W("new", "eng-alpha", "main", pod_sets=[P("one", 60, cpu=1)])],
            admitted=[
                W(
                    "existing",
                    "eng-beta",
                    pod_sets=[P("one", 45, cpu=1)],
                    admission=("eng-beta", {"cpu": "on-demand"}),
                )
            ],
        ),
        expect({"eng-alpha/new": A("eng-alpha", ("one", {"cpu": "spot"}, 60))}),
    ),
    (
        "workload-in-nonexistent-cluster-queue-waits",
        schedule_fixture(pending=[W("foo", "sales", "cq-nonexistent-queue", cpu=1)]),
        expect(pending=("sales/foo",)),
    ),
    (
        "cluster-queue-with-nonexistent-flavor-is-inactive",
        schedule_fixture(pending=[W("foo", "sales", "flavor-nonexistent-queue", cpu=1)]),
        expect(pending=("sales/foo",)),
    ),
    (
        "no-overadmission-while-borrowing",
        schedule_fixture(
            extra_cqs=[
                doc_cluster_queue(
                    "eng-gamma",
                    doc_group(_cpu("on-demand", 50, 10), _cpu("spot", 0, 100)),
                    cohort="eng",
                    reclaim="Any",
                    within="LowerPriority",
                )
            ],
            extra_lqs=[("eng-gamma", "main", "eng-gamma")],
            pending=[
                W("new", "eng-beta", "main", created=-2, pod_sets=[P("one", 50, cpu=1)]),
                W("new-alpha", "eng-alpha", "main", created=-1, pod_sets=[P("one", 1, cpu=1)]),
                W("new-gamma", "eng-gamma", "main", created=0, pod_sets=[P("one", 50, cpu=1)]),
            ],
            admitted=[
                {
                    **W(
                        "existing",
                        "eng-gamma",
                        pod_sets=[P("borrow-on-demand", 51, cpu=1), P("use-all-spot", 100, cpu=1)],
                    ),
                    "admission": {
                        "clusterQueue": "eng-gamma",
                        "podSets": [
                            {
                                "name": "borrow-on-demand",
                                "flavors": {"cpu": "on-demand"},
                                "count": 51,
                            },
                            {"name": "use-all-spot", "flavors": {"cpu": "spot"}, "count": 100},
                        ],
                    },
                }
            ],
        ),
        expect(
            {
                "eng-alpha/new-alpha": A("eng-alpha", ("one", {"cpu": "on-demand"}, 1)),
                "eng-beta/new": A("eng-beta", ("one", {"cpu": "on-demand"}, 50)),
            },
            pending=("eng-gamma/new-gamma",),
        ),
    ),
    (
        "partial-admission-single-variable-pod-set",
        schedule_fixture(pending=[W("new", "sales", "main", pod_sets=[P("one", 50, 20, cpu=2)])]),
        expect({"sales/new": A("sales", ("one", {"cpu": "default"}, 25))}),
    ),
    (
        "partial-admission-preempts-first-when-full-count-can-preempt",
        schedule_fixture(
            pending=[
                W(
                    "new",
                    "eng-beta",
                    "main",
                    priority=4,
                    pod_sets=[P("one", 20, 10, example_com__gpu=1)],
                )
            ],
            admitted=[
                W(
                    "old",
                    "eng-beta",
                    priority=-4,
                    pod_sets=[P("one", 10, example_com__gpu=1)],
                    admission=("eng-beta", {"example.com/gpu": "model-a"}),
                )
            ],
        ),
        expect(preempted=("eng-beta/old",), pending=("eng-beta/new",)),
    ),
    (
        "partial-admission-disabled",
        schedule_fixture(
            pending=[
                W(
                    "new",
                    "sales",
                    "main",
                    pod_sets=[
                        P("one", 20, cpu=1),
                        P("two", 30, 10, cpu=1),
                        P("three", 15, 5, cpu=1),
                    ],
                )
            ],
            partial_admission=False,
        ),
        expect(pending=("sales/new",)),
    ),
    (
        "two-workloads-borrow-different-resources-of-one-flavor",
        schedule_fixture(
            extra_cqs=_three_cqs(),
            extra_lqs=THREE_LQS,
            pending=[
                W("wl1", "sales", "lq1", priority=-1, r1=16),
                W("wl2", "sales", "lq2", priority=-2, r2=16),
            ],
        ),
        expect(
            {
                "sales/wl1": A("cq1", ("main", {"r1": "default"}, 1)),
                "sales/wl2": A("cq2", ("main", {"r2": "default"}, 1)),
            }
        ),
    ),
    (
        "only-one-workload-borrows-when-the-cohort-cannot-fit-both",
        schedule_fixture(
            extra_cqs=_three_cqs(),
            extra_lqs=THREE_LQS,
            pending=[
                W("wl1", "sales", "lq1", priority=-1, r1=16),
                W("wl2", "sales", "lq2", priority=-2, r1=16),
            ],
        ),
        expect({"sales/wl1": A("cq1", ("main", {"r1": "default"}, 1))}, pending=("sales/wl2",)),
    ),
    (
        "multiple-preemptions-without-borrowing",
        schedule_fixture(
            extra_cqs=_other_alpha_beta(2, 2),
            extra_lqs=OTHER_LQS,
            admitted=[
                W("a1", "eng-alpha", "other", cpu=2, admission=("other-alpha", {"cpu": "default"})),
                W("b1", "eng-beta", "other", cpu=2, admission=("other-beta", {"cpu": "default"})),
            ],
            pending=[
                W("preemptor", "eng-alpha", "other", priority=100, cpu=2),
                W("preemptor", "eng-beta", "other", priority=100, cpu=2),
            ],
        ),
        expect(
            preempted=("eng-alpha/a1", "eng-beta/b1"),
            pending=("eng-alpha/preemptor", "eng-beta/preemptor"),
        ),
    ),
    (
        "multiple-preemptions-skip-when-shared-resource-is-limited",
        schedule_fixture(
            extra_cqs=[
                *_other_alpha_beta(2, 2, bwc="LowerPriority"),
                doc_cluster_queue("resource-bank", doc_group(_cpu("default", 1)), cohort="other"),
            ],
            extra_lqs=OTHER_LQS,
            admitted=[
                W("a1", "eng-alpha", "other", cpu=2, admission=("other-alpha", {"cpu": "default"})),
                W("b1", "eng-beta", "other", cpu=2, admission=("other-beta", {"cpu": "default"})),
            ],
            pending=[
                W("preemptor", "eng-alpha", "other", priority=100, cpu=3),
                W("pretending-preemptor", "eng-beta", "other", priority=99, cpu=3),
            ],
        ),
        expect(
            preempted=("eng-alpha/a1",),
            pending=("eng-alpha/preemptor", "eng-beta/pretending-preemptor"),
        ),
    ),
    (
        "workload-requiring-reclamation-is-processed-before-full-queue",
        schedule_fixture(
            extra_cqs=[
                doc_cluster_queue("cq1", doc_group(_res("on-demand", "gpu", 10)), cohort="other"),
                doc_cluster_queue(
                    "cq2", doc_group(_res("on-demand", "gpu", 10)), cohort="other", reclaim="Any"
                ),
                doc_cluster_queue("cq3", doc_group(_res("on-demand", "gpu", 0)), cohort="other"),
            ],
            extra_lqs=[
                ("eng-alpha", "lq", "cq1"),
                ("eng-beta", "lq", "cq2"),
                ("eng-gamma", "lq", "cq3"),
            ],
            admitted=[
                W("admitted-1", "eng-alpha", "lq", gpu=5, admission=("cq1", {"gpu": "on-demand"})),
                W("admitted-2", "eng-gamma", "lq", gpu=5, admission=("cq3", {"gpu": "on-demand"})),
                W(
                    "admitted-3",
                    "eng-gamma",
                    "lq",
                    priority=1,
                    gpu=5,
                    admission=("cq3", {"gpu": "on-demand"}),
                ),
            ],
            pending=[
                W("wl1", "eng-alpha", "lq", created=0, gpu=10),
                W("wl2", "eng-beta", "lq", created=1, gpu=10),
            ],
        ),
        expect(preempted=("eng-gamma/admitted-2",), pending=("eng-alpha/wl1", "eng-beta/wl2")),
    ),
    (
        "in-a-hierarchical-cohort-the-workload-borrowing-less-goes-first",
        schedule_fixture(
            cohorts=[
                doc_cohort("root"),
                doc_cohort("guaranteed", "root", doc_group(_cpu("default", 4))),
            ],
            extra_cqs=[
                doc_cluster_queue("guaranteed", doc_group(_cpu("default", 0)), cohort="guaranteed"),
                doc_cluster_queue("best-effort", doc_group(_cpu("default", 0)), cohort="root"),
            ],
            extra_lqs=[
                ("eng-alpha", "lq-guaranteed", "guaranteed"),
                ("eng-alpha", "lq-best-effort", "best-effort"),
            ],
            pending=[
                W("guaranteed", "eng-alpha", "lq-guaranteed", pod_sets=[P("one", 1, cpu=4)]),
                W(
                    "best-effort",
                    "eng-alpha",
                    "lq-best-effort",
                    priority=3,
                    pod_sets=[P("one", 1, cpu=4)],
                ),
            ],
        ),
        expect(
            {"eng-alpha/guaranteed": A("guaranteed", ("one", {"cpu": "default"}, 1))},
            pending=("eng-alpha/best-effort",),
        ),
    ),
    (
        "pending-admission-check-with-no-fit-and-fit-flavors",
        schedule_fixture(pending=[W("pending-check", "eng-beta", "main", cpu=80)]),
        expect({"eng-beta/pending-check": A("eng-beta", ("main", {"cpu": "spot"}, 1))}),
    ),
    (
        "fair-sharing-prefers-the-non-borrowing-subtree",
        schedule_fixture(
            fair_sharing=True,
            cohorts=[
                doc_cohort("root"),
                doc_cohort("cohort-a", "root", doc_group(_cpu("on-demand", 10))),
                doc_cohort("cohort-b", "root"),
            ],
            extra_cqs=[
                doc_cluster_queue("cq-a", doc_group(_cpu("on-demand", 0)), cohort="cohort-a"),
                doc_cluster_queue("cq-b", doc_group(_cpu("on-demand", 5)), cohort="cohort-b"),
                doc_cluster_queue("cq-c", doc_group(_cpu("on-demand", 0)), cohort="cohort-b"),
            ],
            extra_lqs=[
                ("eng-alpha", "lq-a", "cq-a"),
                ("eng-alpha", "lq-b", "cq-b"),
                ("eng-alpha", "lq-c", "cq-c"),
            ],
            admitted=[
                W(
                    "c0",
                    "eng-alpha",
                    "lq-c",
                    pod_sets=[P("one", 1, cpu=10)],
                    admission=("cq-c", {"cpu": "on-demand"}),
                )
            ],
            pending=[
                W("wl-a", "eng-alpha", "lq-a", pod_sets=[P("one", 1, cpu=5)]),
                W("wl-b", "eng-alpha", "lq-b", pod_sets=[P("one", 1, cpu=5)]),
            ],
        ),
        expect(
            {"eng-alpha/wl-a": A("cq-a", ("one", {"cpu": "on-demand"}, 1))},
            pending=("eng-alpha/wl-b",),
        ),
    ),
    (
        "fair-sharing-per-flavor-ignores-cross-flavor-borrowing",
        schedule_fixture(
            fair_sharing=True,
            cohorts=[
                doc_cohort("root"),
                doc_cohort("cohort-a", "root", doc_group(_cpu("on-demand", 10))),
                doc_cohort("cohort-b", "root", doc_group(_cpu("spot", 10))),
            ],
            extra_cqs=[
                doc_cluster_queue(
                    "cq-a", doc_group(_cpu("on-demand", 0), _cpu("spot", 0)), cohort="cohort-a"
                ),
                doc_cluster_queue(
                    "cq-b", doc_group(_cpu("on-demand", 5), _cpu("spot", 0)), cohort="cohort-b"
                ),
            ],
            extra_lqs=[("eng-alpha", "lq-a", "cq-a"), ("eng-alpha", "lq-b", "cq-b")],
            admitted=[
                W(
                    "spot-admitted",
                    "eng-alpha",
                    "lq-a",
                    pod_sets=[P("one", 1, cpu=5)],
                    admission=("cq-a", {"cpu": "spot"}),
                ),
                W(
                    "od-admitted",
                    "eng-alpha",
                    "lq-b",
                    pod_sets=[P("one", 1, cpu=8)],
                    admission=("cq-b", {"cpu": "on-demand"}),
                ),
            ],
            pending=[
                W("wl-a", "eng-alpha", "lq-a", pod_sets=[P("one", 1, cpu=4)]),
                W("wl-b", "eng-alpha", "lq-b", pod_sets=[P("one", 1, cpu=4)]),
            ],
        ),
        expect(
            {"eng-alpha/wl-a": A("cq-a", ("one", {"cpu": "on-demand"}, 1))},
            pending=("eng-alpha/wl-b",),
        ),
    ),
    (
        "fair-sharing-preempts-from-the-queue-with-the-highest-share",
        schedule_fixture(
            fair_sharing=True,
            extra_cqs=[
                doc_cluster_queue("eng-gamma", doc_group(_cpu("on-demand", 50, 0)), cohort="eng")
            ],
            admitted=[
                W("all-spot", "eng-alpha", cpu=100, admission=("eng-alpha", {"cpu": "spot"})),
                *(
                    W(
                        f"alpha{i}",
                        "eng-alpha",
                        uid=f"alpha{i}",
                        cpu=20,
                        admission=("eng-alpha", {"cpu": "on-demand"}),
                    )
                    for i in range(1, 5)
                ),
                *(
                    W(
                        f"gamma{i}",
                        "eng-gamma",
                        uid=f"gamma{i}",
                        cpu=10 if i == 1 else 20,
                        admission=("eng-gamma", {"cpu": "on-demand"}),
                    )
                    for i in range(1, 5)
                ),
            ],
            pending=[W("preemptor", "eng-beta", "main", cpu=30)],
        ),
        expect(preempted=("eng-alpha/alpha1", "eng-gamma/gamma1"), pending=("eng-beta/preemptor",)),
    ),
    (
        "fair-sharing-schedules-the-highest-priority-first",
        schedule_fixture(
            fair_sharing=True,
            cohorts=[doc_cohort("cohort-a", None, doc_group(_cpu("on-demand", 10)))],
            extra_cqs=[
                doc_cluster_queue("b", doc_group(_cpu("on-demand", 0)), cohort="cohort-a"),
                doc_cluster_queue("c", doc_group(_cpu("on-demand", 0)), cohort="cohort-a"),
            ],
            extra_lqs=[("eng-alpha", "lq-b", "b"), ("eng-alpha", "lq-c", "c")],
            pending=[
                W("b1", "eng-alpha", "lq-b", priority=99, pod_sets=[P("one", 1, cpu=10)]),
                W("c1", "eng-alpha", "lq-c", priority=101, pod_sets=[P("one", 1, cpu=10)]),
            ],
        ),
        expect(
            {"eng-alpha/c1": A("c", ("one", {"cpu": "on-demand"}, 1))}, pending=("eng-alpha/b1",)
        ),
    ),
    (
        "fair-sharing-prefers-reclamation-over-in-queue-preemption",
        schedule_fixture(
            fair_sharing=True,
            extra_cqs=[
                doc_cluster_queue(
                    "other-alpha",
                    doc_group(_res("on-demand", "gpu", 7), _res("spot", "gpu", 7)),
                    cohort="other",
                    within="LowerPriority",
                    reclaim="LowerPriority",
                ),
                doc_cluster_queue(
                    "other-beta",
                    doc_group(_res("on-demand", "gpu", 3), _res("spot", "gpu", 3)),
                    cohort="other",
                ),
            ],
            extra_lqs=OTHER_LQS,
            admitted=[
                W(
                    "a1",
                    "eng-alpha",
                    "other",
                    priority=50,
                    gpu=5,
                    admission=("other-alpha", {"gpu": "on-demand"}),
                ),
                W(
                    "b1",
                    "eng-beta",
                    "other",
                    priority=50,
                    gpu=5,
                    admission=("other-beta", {"gpu": "spot"}),
                ),
            ],
            pending=[W("preemptor", "eng-alpha", "other", priority=100, gpu=8)],
        ),
        expect(preempted=("eng-beta/b1",), pending=("eng-alpha/preemptor",)),
    ),
]


def _strict_fifo(**kw: Any) -> dict[str, Any]:
    return doc_cluster_queue(
        "strict-fifo-cq",
        doc_group(_cpu("on-demand", 5, 0)),
        cohort="cohort",
        strategy="StrictFIFO",
        namespace_label="eng",
        **kw,
    )


MULTI_CYCLE: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "strict-fifo-blocks-lower-priority-workloads-behind-its-head",
        doc_scenario(
            cluster_queues=[_strict_fifo()],
            local_queues=[("foo", "strict-fifo-q", "strict-fifo-cq")],
            flavors=["on-demand"],
            cohorts=[doc_cohort("cohort")],
            pending=[
                W("wl1", "foo", "strict-fifo-q", priority=100, created=1, cpu=2),
                W("wl2", "foo", "strict-fifo-q", priority=10, created=2, cpu=5),
                W("wl3", "foo", "strict-fifo-q", priority=1, created=3, cpu=1),
            ],
            namespaces={"foo": {"dep": "eng"}},
            until_stable=True,
        ),
        expect(
            {"foo/wl1": A("strict-fifo-cq", ("main", {"cpu": "on-demand"}, 1))},
            pending=("foo/wl2", "foo/wl3"),
        ),
    ),
    (
        "strict-fifo-namespace-mismatch-does-not-block",
        doc_scenario(
            cluster_queues=[_strict_fifo()],
            local_queues=[
                ("core", "not-matching", "strict-fifo-cq"),
                ("foo", "matching", "strict-fifo-cq"),
            ],
            flavors=["on-demand"],
            cohorts=[doc_cohort("cohort")],
            pending=[
                W("wl1", "foo", "matching", priority=100, created=1, cpu=2),
                W("wl2", "core", "not-matching", priority=10, created=2, cpu=5),
                W("wl3", "foo", "matching", priority=1, created=3, cpu=1),
            ],
            namespaces={"foo": {"dep": "eng"}, "core": {}},
            until_stable=True,
        ),
        expect(
            {
                "foo/wl1": A("strict-fifo-cq", ("main", {"cpu": "on-demand"}, 1)),
                "foo/wl3": A("strict-fifo-cq", ("main", {"cpu": "on-demand"}, 1)),
            },
            pending=("core/wl2",),
        ),
    ),
    (
        "pods-only-quota-admits-the-smaller-workload",
        doc_scenario(
            cluster_queues=[
                doc_cluster_queue("pods-only", doc_group(_res("on-demand", "pods", 5)))
            ],
            local_queues=[("core", "q", "pods-only")],
            flavors=["on-demand"],
            admitted=[
                W(
                    "wl1",
                    "core",
                    "q",
                    pod_sets=[P("main", 3)],
                    admission=("pods-only", {"pods": "on-demand"}),
                )
            ],
            pending=[
                W("wl2", "core", "q", created=1, pod_sets=[P("main", 3)]),
                W("wl3", "core", "q", created=2, pod_sets=[P("main", 2)]),
            ],
            until_stable=True,
        ),
        expect(
            {"core/wl3": A("pods-only", ("main", {"pods": "on-demand"}, 2))}, pending=("core/wl2",)
        ),
    ),
    (
        "strict-fifo-pending-head-does-not-block-borrowing-elsewhere",
        doc_scenario(
            cluster_queues=[
                _strict_fifo(),
                doc_cluster_queue("team-a", doc_group(_cpu("on-demand", 5)), cohort="cohort"),
                doc_cluster_queue("shared", doc_group(_cpu("on-demand", 5)), cohort="cohort"),
            ],
            local_queues=[
                ("foo", "strict-fifo-q", "strict-fifo-cq"),
                ("foo", "team-a-lq", "team-a"),
            ],
            flavors=["on-demand"],
            cohorts=[doc_cohort("cohort")],
            admitted=[
                W(
                    "wl",
                    "foo",
                    "strict-fifo-q",
                    priority=10,
                    cpu=3,
                    admission=("strict-fifo-cq", {"cpu": "on-demand"}),
                ),
                W(
                    "player1-a",
                    "foo",
                    "team-a-lq",
                    priority=1,
                    cpu=5,
                    admission=("team-a", {"cpu": "on-demand"}),
                ),
            ],
            pending=[
                W("pending-wl", "foo", "strict-fifo-q", priority=99, created=1, cpu=3),
                W("player2-a", "foo", "team-a-lq", priority=11, created=2, cpu=5),
                W("player3-a", "foo", "team-a-lq", priority=10, created=3, cpu=1),
            ],
            namespaces={"foo": {"dep": "eng"}},
            until_stable=True,
        ),
        expect(
            {"foo/player2-a": A("team-a", ("main", {"cpu": "on-demand"}, 1))},
            pending=("foo/pending-wl", "foo/player3-a"),
        ),
    ),
    (
        "preemptor-is-admitted-once-its-victim-is-gone",
        doc_scenario(
            cluster_queues=[
                doc_cluster_queue("q", doc_group(_cpu("default", 4)), within="LowerPriority")
            ],
            local_queues=[("default", "lq", "q")],
            flavors=["default"],
            admitted=[
                W("low", "default", "lq", priority=-1, cpu=4, admission=("q", {"cpu": "default"}))
            ],
            pending=[W("high", "default", "lq", priority=10, cpu=4)],
            until_stable=True,
        ),
        # the victim is requeued and waits behind the higher-priority workload
        expect(
            {"default/high": A("q", ("main", {"cpu": "default"}, 1))}, preempted=("default/low",)
        ),
    ),
]


@pytest.mark.parametrize(
    ("doc", "want"),
    [pytest.param(d, w, id=name) for name, d, w in CASES + MULTI_CYCLE],
)
def test_kueue_case(doc: dict[str, Any], want: dict[str, Any]) -> None:
    scenario = load_scenario(doc, source="kueue-case")
    assert check_outcome(run_scenario_in_engine(scenario), want) == []
