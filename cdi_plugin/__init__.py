"""cdi-plugin: host devices for containers through the Container Device Interface (CDI)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
