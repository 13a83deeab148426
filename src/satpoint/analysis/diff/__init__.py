"""What changed between two results folders: matching, brackets, figures at equal load with a block bootstrap, the one
verdict rule and ``diff.json``."""
