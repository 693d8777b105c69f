"""Tools the operator defines in git (the policy folder's tools/*.toml), run in the sandbox."""
