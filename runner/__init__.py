"""The GPU seam: sandboxed evaluation of candidates (imports only torch and triton)."""
