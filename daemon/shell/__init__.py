"""Bash command text to facts the policy and the scheduler can use (programs, arguments, redirects,
read-only or not). Imports neither the tools nor the policy."""
