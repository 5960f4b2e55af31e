"""``python -m microcompact.cli``: the ``microcompact`` command."""

from . import main

main()
