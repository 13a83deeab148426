"""``satpoint sim --autoscale``: replicas of known capacity behind an HPA-like rule, for testing ``scale-test``."""
