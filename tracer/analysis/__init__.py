"""Read-only analysis of a loaded trace: budget model, flags, series, comparison, timing."""
