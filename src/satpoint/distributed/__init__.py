"""Generator shards on several hosts through Ray (the optional ``ray`` extra).

Nothing here imports Ray at module level: ``coordinator`` (clock offsets, the two-phase start, polling,
merging) and ``host`` (what runs on each host) are plain Python behind the ``ShardHost`` protocol, and
only ``ray_fleet`` imports Ray, when a run asks for it (``--ray``).
"""
