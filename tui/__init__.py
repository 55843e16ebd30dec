"""schedscope tui view. Not built yet: see the open issue for the tui app."""
