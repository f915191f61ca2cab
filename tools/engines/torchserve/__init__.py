"""TorchServe 0.12 (Java) as one of tsvk's engines: started, drained and watched through its own APIs."""
