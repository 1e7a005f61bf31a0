"""Code generated from proto/pluginregistration/v1 and proto/dra/{v1,v1beta1} by proto/generate.py.

Only cdi_plugin.dra.api imports this package.
"""
