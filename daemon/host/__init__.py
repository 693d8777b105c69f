"""Working on the daemon's own host safely: child processes, and file access confined to a
workspace by descriptors rather than by path strings."""
