"""Model plumbing for the roles: the client, recorded calls, verdict parsing, prompts and code blocks."""
