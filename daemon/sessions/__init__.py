"""Sessions: their state (workspace, read-state, mode, grants), the store that finds them and the
manager that opens, closes and expires them."""
