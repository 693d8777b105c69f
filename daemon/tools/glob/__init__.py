"""Glob: the pattern engine that walks a workspace (`engine`) and the tool (`tool`)."""
