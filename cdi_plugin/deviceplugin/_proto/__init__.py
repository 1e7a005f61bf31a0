"""Code generated from proto/deviceplugin/v1beta1/api.proto by proto/generate.py; do not edit.

Only cdi_plugin.deviceplugin.api imports this package.
"""
