"""The job kinds kueueweb runs (Kueue's ``pkg/controller/jobs``): one module per kind, and
here one registration line per kind."""

from __future__ import annotations

from scheduling.jobframework.registry import register
from scheduling.jobs.appwrapper import AppWrapper
from scheduling.jobs.cronjob import CronJob
from scheduling.jobs.deployment import Deployment
from scheduling.jobs.job import BatchJob
from scheduling.jobs.jobset import JobSet
from scheduling.jobs.kubeflow import JAXJob, PaddleJob, PyTorchJob, TFJob, XGBoostJob
from scheduling.jobs.leaderworkerset import LeaderWorkerSet
from scheduling.jobs.mpijob import MPIJob
from scheduling.jobs.pod import Pod
from scheduling.jobs.raycluster import RayCluster
from scheduling.jobs.rayjob import RayJob
from scheduling.jobs.rayservice import RayService
from scheduling.jobs.sparkapplication import SparkApplication
from scheduling.jobs.statefulset import StatefulSet
from scheduling.jobs.trainjob import TrainJob

register(BatchJob())
register(JobSet())
register(PyTorchJob())
register(TFJob())
register(XGBoostJob())
register(PaddleJob())
register(JAXJob())
register(MPIJob())
register(RayCluster())
register(RayJob())
register(AppWrapper())
register(SparkApplication())
register(RayService())
register(TrainJob())
register(CronJob())
register(Pod())
register(Deployment())
register(StatefulSet())
register(LeaderWorkerSet())
