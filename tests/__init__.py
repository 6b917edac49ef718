"""effctx's test suite: a package, so that every test module and helper has a unique name
(`tests.tui.conftest`, `tests.helpers.tiny_gguf`) and any combination of its folders collects."""
