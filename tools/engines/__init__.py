"""Engines that serve tsvk archives: TorchServe (tools/serve) is the default; `kserve` serves the same archives in
worker processes of tsvk's own behind KServe's model server, with no Java."""
