"""What several test modules share, imported as `tests.helpers.NAME`: never from a
conftest or from another test module."""
