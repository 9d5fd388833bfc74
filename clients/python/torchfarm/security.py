"""CURVE keys for a farm whose job socket requires them (docs/security.md).

``torchfarm keygen --out NAME`` writes ``NAME.key`` (public) and ``NAME.key_secret`` (secret,
mode 0600). A client needs the server's public key and its own pair::

    client = torchfarm.Client("tcp://farm:5555", server_key="server.key",
                              client_keys="alice.key_secret")

``server_key`` is a Z85 key or the path of a key file; ``client_keys`` a ``(public, secret)``
pair of Z85 keys or the path of a ``.key_secret`` file (the public key is derived from it).
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple, Optional, Tuple, Union

import zmq
import zmq.utils.z85

KEY_LENGTH = 40  # Z85 characters of a 32-byte key

ClientKeys = Union[str, "os.PathLike[str]", Tuple[str, str]]


class CurveKeys(NamedTuple):
    server_public: str
    public: str
    secret: str


def _is_key(text: str) -> bool:
    if len(text) != KEY_LENGTH:
        return False
    try:
        return len(zmq.utils.z85.decode(text.encode("ascii"))) == 32
    except (ValueError, UnicodeEncodeError, KeyError):
        return False


def read_key_file(path: Union[str, "os.PathLike[str]"]) -> str:
    """The key in a key file: its first line that is neither blank nor a ``#`` comment."""
    with open(path, "r", encoding="ascii", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if not _is_key(line):
                raise ValueError(f"key file {str(path)!r} does not hold a 40-character Z85 key")
            return line
    raise ValueError(f"key file {str(path)!r} holds no key")


def _key(value: Union[str, "os.PathLike[str]"], what: str) -> str:
    if isinstance(value, str) and _is_key(value):
        return value
    if isinstance(value, (str, os.PathLike)):
        return read_key_file(value)
    raise TypeError(f"{what} must be a Z85 key or a key file path, got {type(value).__name__}")


def load_client_keys(secret_key_file: Union[str, "os.PathLike[str]"]) -> Tuple[str, str]:
    """(public, secret) from a ``NAME.key_secret`` file, refusing one others may read."""
    mode = os.stat(secret_key_file).st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(f"secret key file {str(secret_key_file)!r} has mode "
                         f"{stat.S_IMODE(mode):04o}; chmod 600 it")
    secret = read_key_file(secret_key_file)
    public = zmq.curve_public(secret.encode("ascii")).decode("ascii")
    return public, secret


def curve_keys(server_key: Optional[Union[str, "os.PathLike[str]"]],
               client_keys: Optional[ClientKeys]) -> Optional[CurveKeys]:
    """Validates the client's security arguments; None when CURVE is not asked for."""
    if server_key is None and client_keys is None:
        return None
    if server_key is None or client_keys is None:
        raise ValueError("CURVE needs both server_key and client_keys")
    server = _key(server_key, "server_key")
    if isinstance(client_keys, tuple):
        if len(client_keys) != 2 or not all(isinstance(k, str) and _is_key(k)
                                            for k in client_keys):
            raise ValueError("client_keys must be (public, secret), two 40-character Z85 keys")
        public, secret = client_keys
    else:
        public, secret = load_client_keys(client_keys)
    return CurveKeys(server, public, secret)


def apply_curve(socket: zmq.Socket, keys: Optional[CurveKeys]) -> None:
    """Makes `socket` a CURVE client with `keys`; call before connect. No-op for None."""
    if keys is None:
        return
    socket.setsockopt(zmq.CURVE_SERVERKEY, keys.server_public.encode("ascii"))
    socket.setsockopt(zmq.CURVE_PUBLICKEY, keys.public.encode("ascii"))
    socket.setsockopt(zmq.CURVE_SECRETKEY, keys.secret.encode("ascii"))
