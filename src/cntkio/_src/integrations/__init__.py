"""Frameworks and worker processes: PyTorch, JAX, Ray, equal steps per rank, shared-memory transport."""
