"""cdi-gen watch: reacting to udev events and config edits."""
