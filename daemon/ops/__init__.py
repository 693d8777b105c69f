"""Running tooljail as a well-behaved system service: the systemd notify protocol (`notify`),
Prometheus metrics (`metrics`) and structured logs (`logs`).

The modules are independent and imported one by one, so a daemon without metrics never imports
prometheus_client.
"""
