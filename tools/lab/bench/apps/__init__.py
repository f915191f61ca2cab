"""Programs the benchmark starts as separate processes: the alternatives a user might write
(Flask under gunicorn, LitServe, one process per job) and the in-process ceiling probe."""
