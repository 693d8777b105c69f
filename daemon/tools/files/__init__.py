"""The tools that change files (Write, Edit, MultiEdit) and what they share: read-before-write,
applying string edits, writing through the sandbox."""
