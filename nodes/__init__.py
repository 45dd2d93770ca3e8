"""The six roles, one module each, plus the model client and prompt loader."""
