"""Shared test code, imported as ``from support.X import ...`` from every test folder (``pythonpath`` in
pyproject.toml puts ``tests/`` on the path): the scripted HTTP servers, PostgreSQL, builders and strategies."""
