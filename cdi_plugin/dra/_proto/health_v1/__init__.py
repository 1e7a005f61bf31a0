"""Code generated from proto/dra-health/v1/api.proto by proto/generate.py; do not edit.

Only cdi_plugin.dra.api imports this package.
"""
