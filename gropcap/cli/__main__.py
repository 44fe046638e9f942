"""``python -m gropcap.cli``: the same as ``python -m gropcap``."""

from gropcap.__main__ import main

main()
