"""The targets' module kinds, one module each (ctk.target_registry names them)."""
