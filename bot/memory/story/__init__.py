"""The memory of a story: its summary, anchors and positions, and its bounded state."""
