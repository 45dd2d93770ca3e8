"""Long-term memory: skill cards, the decision policy, and the Chroma index."""
