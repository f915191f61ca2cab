"""Load and what it costs: closed-loop HTTP load (loadgen), the process tree's CPU and memory sampled while it
runs (sampler), and latency and throughput figures with their spread (stats). `tsvk tune` measures with these,
and so does the lab's benchmarks."""
