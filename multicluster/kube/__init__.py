"""The Kubernetes cluster backend: the only package that imports the ``kubernetes`` client.

A cluster whose connection is ``kubernetes`` runs its admitted jobs on a real API server:

- ``client``: one ``ApiClient`` per cluster, built from its stored kubeconfig (never the
  global configuration), a timeout on every call;
- ``connection``: the probe that sets the cluster's ``Active`` condition, reconnects with
  Kueue's back-off and reads the nodes and capacity;
- ``manifests``: the remote Job and gang ``Workload`` built from a submitted job, and the
  reduced form of watched objects (plain dicts, no client types);
- ``backend``: the calls themselves (jobs, pods, namespaces, the gang ``Workload``) and
  list + watch with resource versions;
- ``sync``: the reconciler, the counterpart of ``multicluster.simulated.runner``;
- ``gangs``: the gang scheduling metrics, from what a pass observes of the gangs;
- ``pod_events``: the Warning events about our pods, kept on their workloads;
- ``errors``: what can go wrong, in three kinds the reconcilers act on.
"""
