"""The served config, planned and written for either engine: the thread-tuned config.properties generator
(serving_config.py: a request becomes a plan, plan.py; rendering.py writes it), the workers a machine's memory holds
(worker_plan.py, memory_limits.py), the memory allocator (allocator.py), free ports, and the archives a config names
checked against its model store and the CPU's precisions.

Keys (tools/keys.py) and the config's limits (tools/limits.py) sit on the floor below; the engines that serve a
config (tools/engines) on the floor above. Nothing here belongs to one engine."""
