"""HTTPS for the sandbox (``--tls-pem``): TLS ends in front of the plain Twisted site, in threads that use Python's
``ssl`` module, so that serving HTTPS costs the sandbox little more than serving HTTP.

Twisted's ``listenSSL`` encrypts through pyOpenSSL's memory BIO in 32 KiB Python-level steps on the reactor thread:
about 100 MiB/s here, so an HTTPS benchmark measured the sandbox rather than its client (docs/benchmarks.md,
"Large files"). Here each TLS connection has one thread and one plain loopback connection to the site: bytes from
the site are read 1 MiB at a time and handed to ``SSLSocket.sendall``, which encrypts in C without the GIL. The
site sees one connection per TLS connection, so connection reuse, cut connections and stalls look to a client as
they do over HTTP (a cut closes the TLS connection after what was sent).
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import ssl
import threading
from pathlib import Path

logger = logging.getLogger(__name__)

#: Bytes read from the site per step (one ``sendall``: OpenSSL cuts it into 16 KiB records in C).
_STEP = 1024 * 1024


def self_signed_pem(directory: Path) -> Path:
    """A private key and self-signed certificate for 127.0.0.1 (P-256, one day) in one PEM file."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    path = directory / "sandbox-tls.pem"
    pem = serialization.Encoding.PEM
    path.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
                     + cert.public_bytes(pem))
    return path


def serve_tls(*, host: str, port: int, pem: str, backend: tuple[str, int]) -> int:
    """Listen for TLS on ``host:port`` (0: any free port) with the key and certificate in ``pem``, forwarding
    each connection to the plain site at ``backend``; return the port. Threads are daemons: they end with the
    process."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pem)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.create_server((host, port), family=family, backlog=128)
    threading.Thread(target=_accept, args=(listener, context, backend), name="sandbox-tls", daemon=True).start()
    return int(listener.getsockname()[1])


def _accept(listener: socket.socket, context: ssl.SSLContext, backend: tuple[str, int]) -> None:
    while True:  # a server's loop: it ends with the process (or the listener)
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_connection, args=(client, context, backend), daemon=True).start()


def _connection(client: socket.socket, context: ssl.SSLContext, backend: tuple[str, int]) -> None:
    try:
        tls = context.wrap_socket(client, server_side=True)
    except (OSError, ssl.SSLError) as exc:  # a client that gave up during the handshake
        logger.debug("TLS handshake failed: %s", exc)
        client.close()
        return
    try:
        plain = socket.create_connection(backend)
    except OSError as exc:
        logger.warning("sandbox site unreachable behind TLS: %s", exc)
        tls.close()
        return
    with contextlib.closing(tls), contextlib.closing(plain), contextlib.suppress(OSError, ssl.SSLError):
        _relay(tls, plain)


def _relay(tls: ssl.SSLSocket, plain: socket.socket) -> None:
    """Both directions in one thread (an SSL object must not be read and written by two threads at once)."""
    buffer = bytearray(_STEP)
    view = memoryview(buffer)
    while True:  # one connection's life: ends when either side closes
        readable = [tls] if tls.pending() else select.select([tls, plain], [], [])[0]
        if tls in readable:
            data = tls.recv(_STEP)
            if not data:  # the client closed: let the site see it, then stop
                plain.shutdown(socket.SHUT_WR)
                return
            plain.sendall(data)
        if plain in readable:
            n = plain.recv_into(buffer)
            if not n:  # the site finished or cut the connection
                return
            tls.sendall(view[:n])
