"""``satpoint sim``: the synthetic OIP server (REST, gRPC, its offline twin), its faults, rates and pipelines, and
``SimServer``, the one launcher for it."""
