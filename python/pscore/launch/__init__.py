"""``pscore-run`` (also ``python -m pscore.launch``): starts the ranks of a script on one node
(launcher.py; its command line: cli.py), watches them (supervisor.py) and routes their output
(output.py)."""

from .launcher import NodeConfig, free_port, main, node_config, rank_environment

__all__ = ["NodeConfig", "free_port", "main", "node_config", "rank_environment"]
