"""Serving: the config.properties generator and its limits, worker plans, our own TorchServe, keys, drain, the container entry."""
