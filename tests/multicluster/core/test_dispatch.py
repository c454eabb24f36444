"""MultiKueue's dispatch rules (pure): nomination per dispatcher, winner, lost winner."""

from __future__ import annotations

from multicluster.core.dispatch import (
    ALL_AT_ONCE,
    EXTERNAL,
    INCREMENTAL,
    RemoteCopy,
    admitting_remote,
    check_active_condition,
    first_finished,
    nominate,
    validate_nominated,
    winner_lost,
)

CONFIG = ["c", "a", "d", "b", "e"]


def test_all_at_once_nominates_every_connected_cluster_sorted_by_name() -> None:
    result = nominate(ALL_AT_ONCE, configured=CONFIG, connected=frozenset({"d", "a", "x"}),
                      nominated=[], rounds=0, round_started_at=None, now=10.0)
    assert result.clusters == ("a", "d")
    assert result.next_at is None


def test_incremental_appends_a_step_of_clusters_per_round_in_config_order() -> None:
    first = nominate(INCREMENTAL, configured=CONFIG, connected=frozenset(), nominated=[],
                     rounds=0, round_started_at=None, now=100.0, step=2)
    assert first.clusters == ("c", "a")  # connected or not
    assert (first.rounds, first.next_at) == (1, 400.0)
    same = nominate(INCREMENTAL, configured=CONFIG, connected=frozenset(),
                    nominated=list(first.clusters), rounds=1, round_started_at=100.0,
                    now=399.0, step=2)
    assert same.clusters == ("c", "a")
    # Two rounds late: both rounds are caught up at once, the last one short.
    late = nominate(INCREMENTAL, configured=CONFIG, connected=frozenset(),
                    nominated=list(first.clusters), rounds=1, round_started_at=100.0,
                    now=700.0, step=2)
    assert late.clusters == ("c", "a", "d", "b", "e")
    assert late.rounds == 3
    assert late.next_at is None


def test_incremental_with_kueues_default_step_of_three() -> None:
    result = nominate(INCREMENTAL, configured=CONFIG, connected=frozenset(), nominated=[],
                      rounds=0, round_started_at=None, now=0.0)
    assert result.clusters == ("c", "a", "d")
    later = nominate(INCREMENTAL, configured=CONFIG, connected=frozenset(),
                     nominated=list(result.clusters), rounds=1, round_started_at=0.0, now=300.0)
    assert later.clusters == ("c", "a", "d", "b", "e")


def test_external_keeps_what_the_outside_controller_wrote() -> None:
    result = nominate(EXTERNAL, configured=CONFIG, connected=frozenset(CONFIG),
                      nominated=["e"], rounds=0, round_started_at=None, now=0.0)
    assert result.clusters == ("e",)


def test_nominated_names_are_validated() -> None:
    assert validate_nominated(["a", "b"], CONFIG) == []
    assert validate_nominated("a", CONFIG) == ["must be a list of cluster names"]
    assert validate_nominated(["a", "a"], CONFIG) == ["must not repeat a cluster"]
    assert validate_nominated(["z", "y"], CONFIG) == [
        "not in the workload's MultiKueueConfig: y, z"]
    assert validate_nominated([f"c{i}" for i in range(21)], [f"c{i}" for i in range(21)]) == [
        "must have at most 20 items"]


def test_the_first_admitted_copy_wins_and_the_first_finished_one_counts() -> None:
    copies = [RemoteCopy("b", admitted_at=20.0), RemoteCopy("a", admitted_at=30.0),
              RemoteCopy("c")]
    winner = admitting_remote(copies)
    assert winner is not None
    assert winner.cluster == "b"
    tie = admitting_remote([RemoteCopy("b", admitted_at=5.0), RemoteCopy("a", admitted_at=5.0)])
    assert tie is not None
    assert tie.cluster == "a"
    assert admitting_remote([RemoteCopy("c")]) is None
    done = first_finished([RemoteCopy("a", finished=("Failed", "x"), finished_at=9.0),
                           RemoteCopy("b", finished=("Succeeded", ""), finished_at=3.0)])
    assert done is not None
    assert done.finished == ("Succeeded", "")


def test_a_lost_winner_is_given_up_after_the_timeout() -> None:
    assert not winner_lost(None, now=10_000.0, worker_lost_timeout=900.0)
    assert not winner_lost(100.0, now=999.0, worker_lost_timeout=900.0)
    assert winner_lost(100.0, now=1000.0, worker_lost_timeout=900.0)


def test_the_admission_check_is_active_when_its_clusters_are() -> None:
    everything = frozenset({"a", "b"})
    assert check_active_condition(["a", "b"], everything, everything, config_name="c") == (
        True, "Active", "The admission check is active")
    assert check_active_condition(["a", "b", "z"], everything, frozenset({"a"}),
                                  config_name="c") == (
        True, "SomeActiveClusters", "Missing clusters: [z], Inactive clusters: [b]")
    assert check_active_condition(["a", "z"], everything, frozenset(), config_name="c") == (
        False, "NoUsableClusters", "Missing clusters: [z], Inactive clusters: [a]")
    assert check_active_condition(None, everything, everything, config_name="cfg") == (
        False, "BadConfig", "Cannot load the AdmissionChecks parameters: "
        'MultiKueueConfig.kueue.x-k8s.io "cfg" not found')
