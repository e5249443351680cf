"""Long-context SFT (the Synth-Long-SFT32K recipe): Dagster-free logic.

``syntactic``: exact questions about a passage's words and phrases.
"""
