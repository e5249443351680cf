"""Outside question sets (``qa_source`` partitions): presets, mapping files, reading, ids.

Dagster-free. ``ragsft sources add`` installs a file or folder under ``$RAGSFT_HOME/sources/<key>/``
with a ``source.json`` naming its preset or mapping; the ``qa/questions`` asset reads it back with
:func:`read_source_folder` into the HotpotQA (``hotpot_qa``) Arrow layout the SFT chain takes.
"""
