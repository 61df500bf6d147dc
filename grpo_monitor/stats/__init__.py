"""Pure tensor functions for every statistic: no state, no I/O, no host sync."""
