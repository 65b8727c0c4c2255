"""pscore's microbenchmarks: `python -m pscore.bench NAME --help`."""
