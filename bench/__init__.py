"""tooljail's benchmark: `python -m bench.bench` (full) and `python -m bench.bench --smoke`."""
