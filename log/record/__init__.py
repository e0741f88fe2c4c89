"""Kafka's RecordBatch v2: header, builder, reader and compression codecs."""
