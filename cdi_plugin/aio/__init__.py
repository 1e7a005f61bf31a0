"""Generic asyncio tools, with no knowledge of devices or specs: a pulse tasks wait on
(:mod:`.pulse`), coalescing of event bursts (:mod:`.coalesce`), inotify on directories that may
not exist yet (:mod:`.dirwatch`), running tasks as one group until a stop (:mod:`.run`), and
asking whether anyone listens on a unix socket (:mod:`.sockets`)."""
