"""Long-context SFT (the Synth-Long-SFT32K recipe): Dagster-free logic.

``syntactic``: exact questions about a passage's words and phrases.
``neighbours``: exact inner-product top-k of passage embeddings (faiss), the RAFT distractors.
``raft``: RAFT augmentation within a token budget counted under the trained model's chat template.
``build``: a ``qa_source``'s examples, RAFT + syntactic rows (variant 2), tables, card, release folder.
``clustered``: contexts from k-means clusters of passages and questions (variant 3).
"""
