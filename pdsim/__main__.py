"""``python -m pdsim`` runs the CLI."""

from pdsim.cli import main

main()
