"""Kueue YAML in and out: the codec between manifests and rows, applying and exporting them, and the hardened YAML reader."""
