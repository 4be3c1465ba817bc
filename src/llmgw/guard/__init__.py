"""Guard policies and judges (not built yet: the foundation has no guard)."""
