"""torchfarm.security: CURVE key files and the client's server_key / client_keys arguments.
No farm needed: a CURVE ROUTER in the test plays the server."""

from __future__ import annotations

import os

import pytest
import zmq

import torchfarm
from torchfarm.security import curve_keys, load_client_keys, read_key_file


def _write_pair(folder, name):
    public, secret = (k.decode() for k in zmq.curve_keypair())
    (folder / f"{name}.key").write_text(f"# {name}\n{public}\n")
    secret_path = folder / f"{name}.key_secret"
    secret_path.write_text(f"{secret}\n")
    os.chmod(secret_path, 0o600)
    return public, secret


def test_key_files_are_read_and_checked(tmp_path):
    public, secret = _write_pair(tmp_path, "alice")
    assert read_key_file(tmp_path / "alice.key") == public
    assert load_client_keys(tmp_path / "alice.key_secret") == (public, secret)
    os.chmod(tmp_path / "alice.key_secret", 0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        load_client_keys(tmp_path / "alice.key_secret")
    (tmp_path / "bad.key").write_text("not a key\n")
    with pytest.raises(ValueError, match="40-character Z85"):
        read_key_file(tmp_path / "bad.key")


def test_arguments_come_in_pairs(tmp_path):
    assert curve_keys(None, None) is None
    with pytest.raises(ValueError, match="both server_key and client_keys"):
        curve_keys("x" * 40, None)
    with pytest.raises(ValueError, match="two 40-character Z85 keys"):
        curve_keys("x" * 40, ("short", "keys"))


def test_client_talks_curve_to_a_curve_server(tmp_path):
    server_public, server_secret = _write_pair(tmp_path, "server")
    _write_pair(tmp_path, "alice")
    context = zmq.Context()
    server = context.socket(zmq.ROUTER)
    server.curve_server = True
    server.curve_secretkey = server_secret.encode()
    port = server.bind_to_random_port("tcp://127.0.0.1")
    try:
        client = torchfarm.Client(f"tcp://127.0.0.1:{port}", timeout=5, context=context,
                                  server_key=str(tmp_path / "server.key"),
                                  client_keys=str(tmp_path / "alice.key_secret"))
        client._socket.send_multipart([b"hello"])
        assert server.poll(5000), "no CURVE handshake"
        frames = server.recv_multipart()
        assert frames[-1] == b"hello"
        assert client._socket.getsockopt(zmq.MECHANISM) == zmq.CURVE
        client.close()
    finally:
        server.close(0)
        context.term()
