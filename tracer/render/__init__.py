"""Text and export renderings of a trace: summary, Perfetto, the timing report."""
