"""The console's own benchmarks: timings that need Textual (a redraw, a typed key)."""
