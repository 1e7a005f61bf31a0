"""Discovered devices to CDI specs: device classes, matching, naming, container edits, spec building.

Pure: no file or device I/O apart from reading the embedded default config (package data).
Never imports the device plugin; the two halves meet only through spec files.
"""
