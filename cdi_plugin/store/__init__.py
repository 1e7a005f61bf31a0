"""Files on disk: the spec directories as runtimes read them (``registry``), checks of spec files
(``validation``), planning (``plan``) and writing (``writer``) specs atomically with the ownership
record (``ownership``), the directory lock (``dirlock``) and the configuration file (``configfile``).

Knows nothing of discovery, generation, the plugin or the CLI. The modules are imported one by
one, not through this package, so that a reader of one file does not load the schema validator.
"""
