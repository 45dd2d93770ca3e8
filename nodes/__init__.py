"""The six roles, one module each; their model plumbing is in ``nodes.model``."""
