"""Widgets: the timeline, the virtual tables and the text panels."""
