"""The console's tests, driven with Textual's Pilot, and its SVG baselines."""
