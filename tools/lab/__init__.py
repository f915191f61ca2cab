"""The lab: what proves the product (benchmarks, robustness and soak runs, the chart's pod checks, the GPU check).

The product (the rest of tsvk_tools) never imports it; the lab's commands join `tsvk` through
`tsvk_tools.lab.commands`, which the CLI looks up by name, so the product runs where the lab is not shipped.
"""
