"""Wiring of the six-role graph: state, configuration, routers, builder."""
