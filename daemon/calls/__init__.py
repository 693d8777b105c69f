"""One call's way through the daemon: the pipeline (look up, validate, hooks, decide, run, map,
budget, audit), the scheduler of a turn's calls, and what they share (locks, remembered answers)."""
