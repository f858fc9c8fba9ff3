"""What the serving gate measures and compares, shared by the host tool, the host checks and
the plugin."""
