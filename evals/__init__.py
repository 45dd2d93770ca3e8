"""Task suites and the eval loop."""
