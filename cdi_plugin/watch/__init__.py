"""Watching: coalescing bursts, inotify on directories, and ``cdi-gen watch`` (uevents, config edits)."""
