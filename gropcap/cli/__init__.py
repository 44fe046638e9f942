"""The command line, the top layer: click commands that turn options into a configuration,
run it and render the result. Nothing below imports from here.

- ``app.py``: the ``gropcap`` group and its core commands (``decode``, ``analyze``,
  ``calibrate``); the other commands are registered lazily (imported when looked up);
- ``options.py``: the options every command shares and their converters (the one table
  of decode, kernel and receive options; ``api.py`` reads it too);
- ``help.py``: click building blocks (help in sections, hidden aliases, ``-`` for stdin);
- ``report.py``: ``explain``, ``baseline``, ``compare``, ``tune``;
- ``replay.py``: ``kernel-replay``.
"""

from gropcap.cli.app import main  # noqa: F401  (the click group; `gropcap.__main__` runs it)
