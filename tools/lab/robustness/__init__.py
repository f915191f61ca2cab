"""Robustness checks against a real TorchServe: hostile input, overload, a killed worker, auth and the
network surface (`tsvk robustness`), and a long soak (`tsvk soak`). Each part reports figures, not
just pass or fail, into benchmarks/results/robustness-*.json|md and soak-*.json|md|png."""
