"""Celery tasks (thin adapters) and the ML engine (plain Python + torch, no Django import)."""
