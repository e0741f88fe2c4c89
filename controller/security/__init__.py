"""Security of the cluster side: ACLs and the authorizer, principal mapping, SASL (SCRAM, PLAIN), session tokens.

The design is in docs/SECURITY.md.
"""
