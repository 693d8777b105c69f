"""Paths as a command line names them, resolved without looking at the disk."""

from __future__ import annotations

import os


def normalised(base: str, word: str) -> str:
    """`word` as an absolute path from the directory `base`, resolved lexically (`.`, `..`,
    repeated and trailing slashes); empty when it is relative and `base` is unknown."""
    if not word.startswith("/"):
        if not base:
            return ""
        word = f"{base}/{word}"
    return "/" + os.path.normpath(word).lstrip("/")
