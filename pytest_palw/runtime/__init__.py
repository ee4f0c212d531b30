"""Driving the PALW-patched runtime: load it, discover the launches, trace them, read the records."""
