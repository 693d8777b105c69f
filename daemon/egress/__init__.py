"""The egress proxy: where a sandbox's connections may go, and the TLS pieces to inspect them."""
