"""The simulated cluster: nodes, gang placement of pods, start delays, run times and faults.

It is the embedded default connection of a cluster (``Cluster.connection_type ==
"simulated"``) and stands in for a Kubernetes cluster's kube-scheduler, Job controller and
kubelets: ``runner.sync_cluster`` is its reconciler.
"""
