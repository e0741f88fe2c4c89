"""The storage engine: record batches, segments, indexes, the partition Log, retention, recovery.

``log`` imports nothing else of the project.
"""
