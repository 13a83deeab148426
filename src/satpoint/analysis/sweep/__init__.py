"""What a sweep concludes: its knobs, values and grid, one measurement's figures, the front and efficiency, the
artefact chosen within a quality loss."""
