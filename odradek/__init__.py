"""Odradek: a distributed, replicated commit log in the family of Apache Kafka.

The clients (Producer, Consumer, Admin) arrive with the broker issue; this package holds the
``odradek`` command line today.
"""

__version__ = "0.1.0"
