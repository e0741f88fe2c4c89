"""The client side of TLS on a plain socket, for the framed listeners (``REPLICATION``, ``DATA``): one context
made from PEM bytes, whatever the caller's settings read them from."""

from __future__ import annotations

import ssl
import tempfile


def client_tls_context(ca_pem: bytes | None, key_pem: bytes | None, cert_pem: bytes | None) -> ssl.SSLContext:
    """TLS 1.2 or newer, the server's certificate and name checked: trust ``ca_pem`` (the system's CAs
    without it), and present ``cert_pem`` with ``key_pem`` when both are given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_pem is not None:
        context.load_verify_locations(cadata=ca_pem.decode("ascii"))
    else:
        context.load_default_certs()
    if key_pem is not None and cert_pem is not None:
        with tempfile.NamedTemporaryFile() as keystore:  # ssl loads a certificate chain from a file only
            keystore.write(key_pem + b"\n" + cert_pem)
            keystore.flush()
            context.load_cert_chain(keystore.name)
    return context
