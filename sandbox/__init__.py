"""tooljail sandbox: disposable, hardened containers that run one tool request each."""
