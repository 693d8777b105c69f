"""Grep: its input and ripgrep argv (`input`), running ripgrep (`ripgrep`), one walk shared by
parallel searches (`shared`), and the tool (`tool`)."""
