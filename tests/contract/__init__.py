"""The cell contract's conformance suite."""
