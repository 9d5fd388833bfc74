"""Python client of torchfarm, a multi-process inference farm for TorchScript models.

    import numpy as np, torchfarm
    client = torchfarm.Client("tcp://127.0.0.1:5555", timeout=10)
    (y,) = client.infer("mlp", np.random.rand(4, 256).astype(np.float32))

Needs pyzmq and numpy; torch tensors are accepted when torch is imported. On the farm's host,
tensors can travel through shared memory (``client.create_shm``, ``ShmTensor``, ``output_shm``).
See docs/clients.md.
"""

from ._wire import Outputs
from .admin import DEFAULT_ADMIN_ENDPOINT, admin_command
from .aio import AsyncClient, async_admin_command
from .client import Client
from .security import load_client_keys, read_key_file
from .shm import AsyncShmRegion, ShmOutput, ShmRegion, ShmTensor
from .errors import (DeadlineExceeded, Internal, InvalidArgument, NotFound, ResourceExhausted,
                     TorchfarmError, Unavailable)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AsyncShmRegion",
    "Client",
    "DEFAULT_ADMIN_ENDPOINT",
    "DeadlineExceeded",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "Outputs",
    "ResourceExhausted",
    "ShmOutput",
    "ShmRegion",
    "ShmTensor",
    "TorchfarmError",
    "Unavailable",
    "admin_command",
    "async_admin_command",
    "load_client_keys",
    "read_key_file",
    "__version__",
]
