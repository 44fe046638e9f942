"""``python -m gropcap`` runs the command line."""

from gropcap.cli import main

main()
