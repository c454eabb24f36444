"""batch/v1 Job → Workload, as Kueue's Job integration does it (``scheduling.jobs.job``,
through ``services.submit_job``)."""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.exceptions import PermissionDenied, ValidationError

from multicluster.models import Cluster
from scheduling import jobframework, services
from scheduling.choices import WorkloadPhase
from scheduling.jobs import job as batch_job
from scheduling.models import ClusterQueue, Event, Job, LocalQueue, Workload, WorkloadPriorityClass
from scheduling.validation import errors_to_dict

EXAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"


def kueue_example(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / name).read_text())


def sha1_hash(*parts: str) -> str:
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:5]


def make_job(**overrides: Any) -> dict[str, Any]:
    """A minimal valid Job in namespace team-a; keyword overrides replace whole sections."""
    manifest: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "pi", "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue"}},
        "spec": {
            "parallelism": 2,
            "template": {
                "spec": {
                    "containers": [{"name": "main", "image": "busybox",
                                    "resources": {"requests": {"cpu": "1"}}}],
                    "restartPolicy": "Never",
                },
            },
        },
    }
    manifest.update(overrides)
    return manifest


def with_container(**container: Any) -> dict[str, Any]:
    manifest = make_job()
    manifest["spec"]["template"]["spec"]["containers"][0].update(container)
    return manifest



# --- Pod counts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parallelism", "completions", "want"),
    [(None, None, 1), (3, None, 3), (3, 2, 2), (2, 5, 2), (None, 5, 1), (0, None, 0)],
    ids=["defaults", "parallelism", "fewer completions", "fewer parallel", "completions only",
         "paused"],
)
def test_pods_count_is_min_of_parallelism_and_completions(
    parallelism: int | None, completions: int | None, want: int
) -> None:
    spec = {k: v for k, v in (("parallelism", parallelism), ("completions", completions)) if v is not None}

    assert batch_job.pods_count(spec) == want


@pytest.mark.parametrize(
    ("parallelism", "completions", "terminal", "reclaimable"),
    [
        (3, 3, 0, 0),
        (3, 3, 1, 1),  # 2 still to run: one slot back
        (3, 3, 3, 3),
        (3, 10, 7, 0),  # 3 still to run with parallelism 3
        (3, 10, 8, 1),
        (1, 1, 1, 0),  # parallelism 1 never reclaims
        (4, None, 2, 2),  # completions default to parallelism
    ],
)
def test_reclaimable_pods_are_the_slots_no_pod_still_needs(parallelism: int, completions: int | None, terminal: int,
                              reclaimable: int) -> None:
    assert batch_job.reclaimable_pods(parallelism, completions, terminal) == reclaimable


# --- Validation of the manifest (no database) -------------------------------------------------


def drop(path: str) -> dict[str, Any]:
    manifest = make_job()
    *parents, last = path.split(".")
    target = manifest
    for part in parents:
        target = target[part]
    del target[last]
    return manifest


def set_at(path: str, value: Any, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    manifest = manifest or make_job()
    *parents, last = path.split(".")
    target: Any = manifest
    for part in parents:
        target = target[int(part)] if part.isdigit() else target.setdefault(part, {})
    target[last] = value
    return manifest


def annotated(annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    manifest = make_job()
    manifest["metadata"]["annotations"] = annotations
    manifest["spec"].update(spec)
    return manifest


def labelled(labels: dict[str, str]) -> dict[str, Any]:
    manifest = make_job()
    manifest["metadata"]["labels"].update(labels)
    return manifest


CPU = "spec.template.spec.containers[0].resources.requests.cpu"
MIN_PARALLELISM = f"metadata.annotations[{batch_job.JOB_MIN_PARALLELISM_ANNOTATION}]"
MAX_EXEC = f"metadata.labels[{jobframework.MAX_EXEC_TIME_LABEL}]"
INVALID_NAME = ("is not a valid name: a lowercase RFC 1123 subdomain must consist of lower case "
                "alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character")


@dataclass(frozen=True)
class RejectionCase:
    name: str
    manifest: dict[str, Any]
    want: dict[str, list[str]]
    namespace: str = "team-a"


REJECTIONS = [
    RejectionCase("negative cpu request", with_container(resources={"requests": {"cpu": "-1"}}),
                  {CPU: ["'-1' must not be negative"]}),
    RejectionCase("not a quantity", with_container(resources={"limits": {"memory": "lots"}}),
                  {"spec.template.spec.containers[0].resources.limits.memory": [
                      "'lots' is not a valid quantity: expected a number with an optional "
                      "suffix such as 500m, 2, 1.5, 4Gi or 1e3"]}),
    RejectionCase("request above its limit",
                  with_container(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),
                  {CPU: ["must be less than or equal to cpu limit of 1"]}),
    RejectionCase("pods is reserved", with_container(resources={"requests": {"pods": "1"}}),
                  {"spec.template.spec.containers[0].resources.requests.pods": [
                      "the key is reserved for internal kueue use"]}),
    RejectionCase("unknown unqualified resource",
                  with_container(resources={"requests": {"gpu": "1"}}),
                  {"spec.template.spec.containers[0].resources.requests.gpu": [
                      "'gpu' must be a standard resource for containers (cpu, memory, "
                      "ephemeral-storage, hugepages-*) or a fully qualified extended resource"]}),
    RejectionCase("no containers", set_at("spec.template.spec.containers", []),
                  {"spec.template.spec.containers": ["must have at least one container"]}),
    RejectionCase("no template", drop("spec.template"), {"spec.template": ["is required"]}),
    RejectionCase("container without image", with_container(image=""),
                  {"spec.template.spec.containers[0].image": ["is required"]}),
    RejectionCase("duplicate container names", set_at("spec.template.spec.initContainers",
                                                      [{"name": "main", "image": "busybox"}]),
                  {"spec.template.spec.containers[0].name": ["duplicate container name 'main'"]}),
    RejectionCase("restartPolicy defaults to Always", drop("spec.template.spec.restartPolicy"),
                  {"spec.template.spec.restartPolicy": [
                      "unsupported value 'Always': supported values: \"OnFailure\", \"Never\""]}),
    RejectionCase("negative parallelism", set_at("spec.parallelism", -1),
                  {"spec.parallelism": ["must be greater than or equal to 0"]}),
    RejectionCase("negative completions", set_at("spec.completions", -2),
                  {"spec.completions": ["must be greater than or equal to 0"]}),
    RejectionCase("parallelism not an integer", set_at("spec.parallelism", "3"),
                  {"spec.parallelism": ["must be an integer, not '3'"]}),
    RejectionCase("neither name nor generateName", drop("metadata.name"),
                  {"metadata.name": ["name or generateName is required"]}),
    RejectionCase("name not DNS-1123", set_at("metadata.name", "Pi_Job"),
                  {"metadata.name": [f"'Pi_Job' {INVALID_NAME}"]}),
    RejectionCase("generateName not DNS-1123",
                  set_at("metadata.generateName", "Sample-", drop("metadata.name")),
                  {"metadata.generateName": [f"'Sample-' {INVALID_NAME}"]}),
    RejectionCase("name longer than a label value", set_at("metadata.name", "a" * 64),
                  {"metadata.name": ["must be no more than 63 characters (the name is a label "
                                     "value of the Job's pods)"]}),
    RejectionCase("namespace differs from the request's", set_at("metadata.namespace", "team-b"),
                  {"metadata.namespace": ["the namespace of the provided object does not match "
                                          "the namespace sent on the request"]}),
    RejectionCase("not a Job", set_at("kind", "Pod"), {"kind": ["must be \"Job\", not 'Pod'"]}),
    RejectionCase("invalid queue name", labelled({jobframework.QUEUE_NAME_LABEL: "User_Queue"}),
                  {f"metadata.labels[{jobframework.QUEUE_NAME_LABEL}]": [f"'User_Queue' {INVALID_NAME}"]}),
    RejectionCase("max-exec-time not an integer", labelled({jobframework.MAX_EXEC_TIME_LABEL: "soon"}),
                  {MAX_EXEC: ["'soon' is not an integer"]}),
    RejectionCase("max-exec-time zero", labelled({jobframework.MAX_EXEC_TIME_LABEL: "0"}),
                  {MAX_EXEC: ["should be greater than 0"]}),
    RejectionCase("min-parallelism not an integer",
                  annotated({batch_job.JOB_MIN_PARALLELISM_ANNOTATION: "two"}),
                  {MIN_PARALLELISM: ["'two' is not an integer"]}),
    RejectionCase("min-parallelism zero", annotated({batch_job.JOB_MIN_PARALLELISM_ANNOTATION: "0"}),
                  {MIN_PARALLELISM: ["should be between 0 and 1"]}),
    RejectionCase("min-parallelism above parallelism",
                  annotated({batch_job.JOB_MIN_PARALLELISM_ANNOTATION: "3"}),
                  {MIN_PARALLELISM: ["should be between 0 and 1"]}),
    RejectionCase("min-parallelism equal to the pods count (Kueue's bound)",
                  annotated({batch_job.JOB_MIN_PARALLELISM_ANNOTATION: "2"}, completions=4),
                  {MIN_PARALLELISM: ["should be between 0 and 1"]}),
    RejectionCase("min-parallelism with an elastic job",
                  annotated({batch_job.JOB_MIN_PARALLELISM_ANNOTATION: "1",
                             jobframework.ELASTIC_JOB_ANNOTATION: "true"}),
                  {MIN_PARALLELISM: ["partial admission and elastic job cannot be used together"]}),
    RejectionCase("prebuilt workloads", labelled({jobframework.PREBUILT_WORKLOAD_LABEL: "wl"}),
                  {f"metadata.labels[{jobframework.PREBUILT_WORKLOAD_LABEL}]": [
                      "prebuilt workloads are not supported: kueueweb creates the Job's "
                      "Workload itself"]}),
    RejectionCase("label value too long", labelled({"team": "x" * 64}),
                  {"metadata.labels[team]": [
                      f"'{'x' * 64}' is not a valid label value: at most 63 alphanumeric "
                      "characters, '-', '_' or '.', starting and ending with an alphanumeric "
                      "character"]}),
]


@pytest.mark.parametrize("case", REJECTIONS, ids=lambda c: c.name)
def test_manifest_is_refused_with_its_field_path(case: RejectionCase) -> None:
    errors = batch_job.validate_job_manifest(case.manifest, namespace=case.namespace)

    assert errors_to_dict(errors) == case.want


def test_kueue_sample_job_is_valid() -> None:
    assert batch_job.validate_job_manifest(kueue_example("sample-job.yaml"), namespace="default") == []


# --- submit_job (database) --------------------------------------------------------------------


@pytest.fixture
def user_queue(manager: Cluster) -> LocalQueue:
    cq = ClusterQueue.objects.create(cluster=manager, name="cluster-queue")
    return LocalQueue.objects.create(
        cluster=manager, namespace="default", name="user-queue", cluster_queue=cq)


@pytest.fixture
def team_queue(manager: Cluster) -> LocalQueue:
    cq = ClusterQueue.objects.create(cluster=manager, name="team-cq")
    return LocalQueue.objects.create(
        cluster=manager, namespace="team-a", name="user-queue", cluster_queue=cq)


def only_workload(job: Job) -> Workload:
    workloads = list(job.workloads.all())
    assert len(workloads) == 1
    return workloads[0]


@pytest.mark.django_db
def test_kueue_sample_job_becomes_one_pending_workload(
    manager: Cluster, user_queue: LocalQueue
) -> None:
    manifest = kueue_example("sample-job.yaml")

    job = services.submit_job(manifest, namespace="default")

    workload = only_workload(job)
    assert re.fullmatch(r"sample-job-[bcdfghjklmnpqrstvwxz2456789]{5}", job.name)
    assert job.cluster == manager
    assert job.namespace == "default"
    assert job.manifest == {
        **manifest,
        "metadata": {**manifest["metadata"], "name": job.name, "uid": str(job.uid),
                     "generation": 1},
    }
    assert workload.name == f"job-{job.name}-{sha1_hash('Job', 'batch', job.name, str(job.uid))}"
    assert workload.namespace == "default"
    assert workload.cluster == manager
    assert workload.queue_name == "user-queue"
    assert workload.local_queue == user_queue
    assert workload.pod_sets == [{
        "name": "main",
        "count": 3,
        "template": manifest["spec"]["template"],
    }]
    assert jobframework.pod_set_requests(workload.pod_sets[0]) == {"cpu": "1", "memory": "200Mi"}
    assert workload.labels == {jobframework.JOB_UID_LABEL: str(job.uid)}
    assert workload.annotations == {}
    assert (workload.priority, workload.priority_class_name, workload.priority_class_source) == (0, "", "")
    assert workload.maximum_execution_time_seconds is None
    assert workload.active is True
    assert workload.phase == WorkloadPhase.PENDING
    assert workload.queued_at == workload.created_at
    assert workload.admission is None
    assert workload.cluster_queue is None


@pytest.mark.django_db
def test_workload_creation_is_recorded_as_kueue_does(team_queue: LocalQueue) -> None:
    job = services.submit_job(make_job(), namespace="team-a")

    workload = only_workload(job)
    events = list(Event.objects.values_list(
        "workload", "object_kind", "object_namespace", "object_name", "type", "reason", "message"))
    assert events == [(workload.pk, "Job", "team-a", "pi", "Normal", "CreatedWorkload",
                       f"Created Workload: team-a/{workload.name}")]
    assert Event.objects.get().created_at == workload.created_at


@pytest.mark.django_db
def test_workload_waits_for_a_local_queue_that_does_not_exist_yet(manager: Cluster) -> None:
    job = services.submit_job(make_job(), namespace="team-a")

    workload = only_workload(job)
    assert (workload.queue_name, workload.local_queue) == ("user-queue", None)


@pytest.mark.django_db
def test_job_template_loses_job_controller_labels_but_keeps_job_name(manager: Cluster) -> None:
    manifest = make_job()
    manifest["spec"]["template"]["metadata"] = {"labels": {
        "app": "pi", "controller-uid": "x", "job-name": "pi", "batch.kubernetes.io/controller-uid": "x",
        "batch.kubernetes.io/job-name": "pi"}}

    job = services.submit_job(manifest, namespace="team-a")

    assert only_workload(job).pod_sets[0]["template"]["metadata"] == {
        "labels": {"app": "pi", "batch.kubernetes.io/job-name": "pi"}}
    assert job.manifest["spec"]["template"]["metadata"]["labels"]["controller-uid"] == "x"


@pytest.mark.django_db
def test_workload_priority_comes_from_the_priority_class_label(manager: Cluster) -> None:
    WorkloadPriorityClass.objects.create(cluster=manager, name="high", value=1000)

    job = services.submit_job(labelled({jobframework.PRIORITY_CLASS_LABEL: "high"}), namespace="team-a")

    workload = only_workload(job)
    assert (workload.priority, workload.priority_class_name, workload.priority_class_source) == (
        1000, "high", "kueue.x-k8s.io/workloadpriorityclass")


@pytest.mark.django_db
def test_priority_class_of_another_domain_does_not_count(manager: Cluster) -> None:
    worker = Cluster.objects.create(name="worker-1", role="worker")
    WorkloadPriorityClass.objects.create(cluster=worker, name="high", value=1000)

    with pytest.raises(ValidationError) as raised:
        services.submit_job(labelled({jobframework.PRIORITY_CLASS_LABEL: "high"}), namespace="team-a")

    assert raised.value.message_dict == {f"metadata.labels[{jobframework.PRIORITY_CLASS_LABEL}]": [
        "WorkloadPriorityClass 'high' not found in cluster 'manager'"]}
    assert (Job.objects.count(), Workload.objects.count()) == (0, 0)


@pytest.mark.django_db
def test_default_priority_class_is_applied_when_it_exists(manager: Cluster) -> None:
    WorkloadPriorityClass.objects.create(cluster=manager, name="default", value=10)

    job = services.submit_job(make_job(), namespace="team-a")

    assert job.manifest["metadata"]["labels"][jobframework.PRIORITY_CLASS_LABEL] == "default"
    assert (only_workload(job).priority, only_workload(job).priority_class_name) == (10, "default")


@pytest.mark.django_db
def test_label_keys_to_copy_are_copied_to_the_workload(
    manager: Cluster, settings: Any
) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "LABEL_KEYS_TO_COPY": ["team", "absent"]}

    job = services.submit_job(labelled({"team": "ml", "other": "x"}), namespace="team-a")

    assert only_workload(job).labels == {"team": "ml", jobframework.JOB_UID_LABEL: str(job.uid)}


@pytest.mark.django_db
def test_max_exec_time_label_sets_maximum_execution_time(manager: Cluster) -> None:
    job = services.submit_job(labelled({jobframework.MAX_EXEC_TIME_LABEL: "600"}), namespace="team-a")

    assert only_workload(job).maximum_execution_time_seconds == 600


@pytest.mark.django_db
def test_min_parallelism_enables_partial_admission(manager: Cluster) -> None:
    manifest = kueue_example("sample-job-partial-admission.yaml")

    job = services.submit_job(manifest, namespace="default")

    pod_set = only_workload(job).pod_sets[0]
    assert (pod_set["count"], pod_set["minCount"]) == (20, 5)


@pytest.mark.django_db
def test_min_parallelism_is_dropped_without_partial_admission(
    manager: Cluster, settings: Any
) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "PARTIAL_ADMISSION": False}

    job = services.submit_job(kueue_example("sample-job-partial-admission.yaml"), namespace="default")

    assert only_workload(job).pod_sets[0] == {
        "name": "main", "count": 20, "template": job.manifest["spec"]["template"]}


@pytest.mark.django_db
def test_elastic_job_workload_is_the_first_slice_named_with_its_generation(manager: Cluster) -> None:
    job = services.submit_job(kueue_example("sample-scalable-job.yaml"), namespace="default")

    workload = only_workload(job)
    assert workload.name == (
        f"job-sample-elastic-job-{sha1_hash('Job', 'batch', 'sample-elastic-job', str(job.uid), '1')}")
    assert workload.annotations == {
        jobframework.ELASTIC_JOB_ANNOTATION: "true",
        jobframework.WORKLOAD_SLICE_NAME_ANNOTATION: workload.name,
    }
    assert workload.pod_sets[0]["count"] == 3


@pytest.mark.django_db
def test_provisioning_request_annotations_pass_through(manager: Cluster) -> None:
    manifest = annotated({"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "60", "note": "x"})

    job = services.submit_job(manifest, namespace="team-a")

    assert only_workload(job).annotations == {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "60"}


@pytest.mark.django_db
def test_queue_name_defaults_to_the_default_local_queue(manager: Cluster) -> None:
    cq = ClusterQueue.objects.create(cluster=manager, name="cq")
    default_queue = LocalQueue.objects.create(
        cluster=manager, namespace="team-a", name="default", cluster_queue=cq)
    manifest = make_job()
    del manifest["metadata"]["labels"]

    job = services.submit_job(manifest, namespace="team-a")

    assert job.manifest["metadata"]["labels"] == {jobframework.QUEUE_NAME_LABEL: "default"}
    workload = only_workload(job)
    assert (workload.queue_name, workload.local_queue) == ("default", default_queue)


@pytest.mark.django_db
def test_queue_name_is_required_without_a_default_local_queue(manager: Cluster) -> None:
    cq = ClusterQueue.objects.create(cluster=manager, name="cq")
    LocalQueue.objects.create(cluster=manager, namespace="team-b", name="default", cluster_queue=cq)
    manifest = make_job()
    del manifest["metadata"]["labels"]

    with pytest.raises(ValidationError) as raised:
        services.submit_job(manifest, namespace="team-a")

    assert raised.value.message_dict == {f"metadata.labels[{jobframework.QUEUE_NAME_LABEL}]": [
        "is required: name the LocalQueue to submit to (there is no LocalQueue 'default' in "
        "namespace 'team-a' to default to)"]}
    assert (Job.objects.count(), Workload.objects.count()) == (0, 0)


@pytest.mark.django_db
def test_invalid_manifest_creates_nothing(manager: Cluster) -> None:
    with pytest.raises(ValidationError) as raised:
        services.submit_job(with_container(resources={"requests": {"cpu": "-1"}}), namespace="team-a")

    assert raised.value.message_dict == {CPU: ["'-1' must not be negative"]}
    assert (Job.objects.count(), Workload.objects.count(), Event.objects.count()) == (0, 0, 0)


@pytest.mark.django_db
def test_job_name_must_be_free_in_its_namespace_and_domain(manager: Cluster) -> None:
    services.submit_job(make_job(), namespace="team-a")
    worker = Cluster.objects.create(name="worker-1", role="worker")

    with pytest.raises(services.ConflictError, match='jobs.batch "pi" already exists'):
        services.submit_job(make_job(), namespace="team-a")
    services.submit_job(make_job(), namespace="team-b")
    services.submit_job(make_job(), namespace="team-a", cluster=worker)

    assert Job.objects.filter(name="pi").count() == 3
    assert Workload.objects.count() == 3


@pytest.mark.django_db
def test_name_taken_by_a_concurrent_submission_is_a_conflict(
    manager: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    services.submit_job(make_job(), namespace="team-a")
    # The other submission passed the name check before this one inserted its row.
    monkeypatch.setattr(services, "_job_name", lambda *args: "pi")

    with pytest.raises(services.ConflictError, match='jobs.batch "pi" already exists'):
        services.submit_job(make_job(), namespace="team-a")

    assert (Job.objects.count(), Workload.objects.count(), Event.objects.count()) == (1, 1, 1)


@pytest.mark.django_db
def test_generate_name_tries_again_when_the_name_is_taken(
    manager: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = iter(["sample-job-aaaaa", "sample-job-aaaaa", "sample-job-bbbbb"])
    monkeypatch.setattr(jobframework, "generate_name", lambda base: next(names))
    manifest = kueue_example("sample-job.yaml")

    first = services.submit_job(manifest, namespace="default")
    second = services.submit_job(manifest, namespace="default")

    assert (first.name, second.name) == ("sample-job-aaaaa", "sample-job-bbbbb")
    assert first.manifest["metadata"]["generateName"] == "sample-job-"


@pytest.mark.django_db
def test_user_needs_a_grant_for_the_namespace(manager: Cluster, operator: Any) -> None:
    with pytest.raises(PermissionDenied):
        services.submit_job(make_job(), namespace="team-b", user=operator)

    job = services.submit_job(make_job(), namespace="team-a", user=operator)

    assert Job.objects.get() == job


@pytest.mark.django_db
def test_manifest_is_stored_as_submitted(manager: Cluster) -> None:
    manifest = make_job()
    manifest["metadata"]["uid"] = "client-chosen"
    submitted = copy.deepcopy(manifest)

    job = services.submit_job(manifest, namespace="team-a")

    assert manifest == submitted
    assert job.manifest == {**submitted, "metadata": {
        **submitted["metadata"], "namespace": "team-a", "uid": str(job.uid),
        "generation": 1}}



# --- The integration's run, stop and status ---------------------------------------------------


def test_run_sets_parallelism_and_placement_and_stop_restores_the_template() -> None:
    integration = batch_job.BatchJob()
    manifest = make_job()
    manifest["spec"]["suspend"] = True
    [pod_set] = integration.pod_sets(manifest, partial_admission=True)
    info = jobframework.PodSetInfo("main", 1, {"instance-type": "spot"}, [],
                                   {"kueue.x-k8s.io/podset": "main"})

    running = integration.run_with_pod_sets_info(manifest, [info])
    stopped = integration.restore_pod_sets_info(integration.suspend(running), [pod_set])

    assert not integration.is_suspended(running)
    assert running["spec"]["parallelism"] == 1
    assert running["spec"]["template"]["spec"]["nodeSelector"] == {"instance-type": "spot"}
    assert integration.is_suspended(stopped)
    assert stopped["spec"]["template"] == manifest["spec"]["template"]
    assert manifest["spec"]["suspend"] is True  # the stored manifest is not changed in place


@pytest.mark.parametrize(("conditions", "want"), [
    ([], None),
    ([{"type": "Complete", "status": "True"}], ("Succeeded", "Job finished successfully")),
    ([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}],
     ("Failed", "BackoffLimitExceeded")),
    ([{"type": "Complete", "status": "False"}], None),
], ids=["running", "complete", "failed", "not yet"])
def test_finished_reads_the_terminal_condition(
    conditions: list[dict[str, str]], want: tuple[str, str] | None,
) -> None:
    assert batch_job.BatchJob().finished({"conditions": conditions}) == want
