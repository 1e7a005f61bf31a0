"""End-to-end tests with a real container runtime."""

from tests.e2e.podman import podman_env

__all__ = ["podman_env"]
