"""MPIJob (``kubeflow.org/v2beta1``): Kueue's MPIJob integration
(``pkg/controller/jobs/mpijob``) and, on the simulated cluster, the MPI operator.

An MPIJob is shaped as the training-operator jobs are (replica specs, ``spec.runPolicy``
with ``suspend``, ``managedBy`` and ``schedulingPolicy.priorityClass``, ``Succeeded`` /
``Failed`` / ``Running`` conditions), so it is one more ``KubeflowJob``: pod sets
``launcher`` then ``worker``; the launcher is required, single, and decides success; it
restarts ``OnFailure`` by default, a worker ``Never``; any container name will do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduling.jobs.kubeflow import KubeflowJob


class MPIJob(KubeflowJob):
    framework_name = "kubeflow.org/mpijob"
    api_version = "kubeflow.org/v2beta1"
    kind = "MPIJob"
    plural = "mpijobs"
    replica_specs_field = "mpiReplicaSpecs"
    replica_types = ("Launcher", "Worker")
    deciding_types = ("Launcher",)
    single_types = ("Launcher",)
    required_types = ("Launcher",)
    managed_by_values = ("kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue")

    def restart_policy(self, rtype: str, spec: Mapping[str, Any]) -> str:
        default = "OnFailure" if rtype == "Launcher" else "Never"
        return str(spec.get("restartPolicy") or default)
