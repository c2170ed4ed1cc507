"""Test-time search strategies: each turns problems and a budget into Solutions."""
