"""pscore's microbenchmarks: `python -m pscore.bench NAME --help`."""

# The benchmarks are modules run by name (bench/__main__.py); the package exports nothing.
__all__: list[str] = []
