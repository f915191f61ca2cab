"""kube-check: the Helm chart's pods run with podman and checked from outside (make kube-check)."""
