"""Our own TorchServe: the config.properties generator, worker plans, starting, finding and stopping it, its drain.

Keys (tools/keys.py) and the config's limits (tools/limits.py) sit on the floor below; the commands that choose an
engine (`tsvk serve`, the image's PID 1) on the floor above, in tools/engines."""
