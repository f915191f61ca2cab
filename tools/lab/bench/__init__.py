"""`tsvk bench`: the measurement behind the toolkit's claims.

Every way a user might classify many independent images with one model (one process per job,
stock TorchServe, hand-tuned TorchServe, tsvk, Flask under gunicorn, LitServe) runs on the same
machine, with the same weights and the same real photographs, in one run; plus the in-process
ceiling of the compiled model. `bench_cli.main` is the entry point; `harness.run_benchmark` the engine.
"""
