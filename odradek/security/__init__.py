"""Security of the clients: their Kafka security keys, SCRAM, properties files for --command-config.

The design is in docs/SECURITY.md.
"""
