"""Kafka's transactions, the coordinator's side: state machine, ``__transaction_state`` records, errors.

See docs/TRANSACTIONS.md for the design and the numbered rules the tests cite.
"""
