"""The browser UI of the multicluster app: clusters, nodes and pods."""
