"""Build time: a model compiled by a backend, verified against eager, packed into a .mar."""
