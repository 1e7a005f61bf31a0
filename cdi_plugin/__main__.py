"""``python -m cdi_plugin`` runs ``cdi-gen``."""

from cdi_plugin.cli.gen import main

main()
