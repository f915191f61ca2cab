"""Engines that serve tsvk archives, and the commands that choose one: TorchServe (tools/serve) is the default;
`kserve` serves the same archives in worker processes of tsvk's own behind KServe's model server, with no Java.
`tsvk serve|stop|keys` (serve_cli.py) and the image's PID 1 (container.py) start whichever engine and front the
config names."""
