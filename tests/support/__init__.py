"""Test support: servers and helpers the tests share (the git smart-HTTP server)."""
