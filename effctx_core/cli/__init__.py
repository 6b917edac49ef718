"""Headless commands, one module per command; main.py parses and dispatches."""
