"""The saturation search and its verdicts: stage verdicts and thresholds, the search's pure decisions, its holds and
budget, the hysteresis reading, capacity, a lost target, the generator's hosts and shards."""
