"""Clients of a running TorchServe: predict, draw, demo, status."""
