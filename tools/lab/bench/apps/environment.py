"""Names of the environment variables that configure the Flask app (gunicorn imports it by name)."""

MODEL_ENV = "TSVK_BENCH_MODEL"
WEIGHTS_ENV = "TSVK_BENCH_WEIGHTS"
THREADS_ENV = "TSVK_BENCH_THREADS"
DEVICE_ENV = "TSVK_BENCH_DEVICE"  # cpu or cuda: where each worker puts its model
READY_DIR_ENV = "TSVK_BENCH_READY_DIR"  # gunicorn_conf touches <dir>/<worker pid> once the worker is ready
