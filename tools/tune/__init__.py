"""`tsvk tune`: measure serving configs on this machine and write the best into a config.

space.py    what may be tried: workers, threads, batch, delay per model, within the vCPUs
search.py   how the budget is spent: a coarse pass over the worker/thread split, then hill-climbing
memory.py   the memory cap, and each candidate's memory estimated from measured worker RSS
measure.py       one candidate on a real TorchServe, driven by the load generator (tools/measure)
tune_outputs.py  the results (json, markdown, Pareto plot) and the tuned config
tune_cli.py      the command: options, progress, outputs
"""
