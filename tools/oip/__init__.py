"""The Open Inference Protocol (KServe v2) front: REST and gRPC for every tsvk model, forwarding to TorchServe.

`config.py` reads what the front serves from the TorchServe config `tsvk config --protocol oip` wrote;
`forward.py` is the KServe model that sends each image of a request to TorchServe; `server.py` runs
the KServe SDK's REST and gRPC servers on the configured address; `process.py` starts and stops the
front next to a TorchServe of our own.
"""
