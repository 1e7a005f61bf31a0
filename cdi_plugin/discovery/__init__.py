"""Host device discovery (udev). Nothing here knows about CDI."""
