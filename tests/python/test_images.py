"""Encoded images through the Python client (docs/clients.md): a list of JPEG bytes is one
"bytes" input for the `img` model (convnet behind decode + jpeg_pre + topk_post, conftest.py)."""

from __future__ import annotations

import io

import numpy as np
import pytest

import torchfarm


@pytest.fixture
def client(farm):
    with torchfarm.Client(farm.endpoint, timeout=30, admin_endpoint=farm.admin_endpoint) as c:
        yield c


def _jpeg(width: int, height: int, seed: int) -> bytes:
    image_module = pytest.importorskip("PIL.Image")  # python3-pil (with python3-torchvision)
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    image_module.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def test_a_list_of_jpeg_bytes_gets_one_answer_per_image(client):
    images = [_jpeg(40, 30, 0), _jpeg(64, 48, 1), _jpeg(31, 77, 2)]
    outputs = client.infer("img", images)
    assert outputs.names == ["probabilities", "classes"]
    probabilities, classes = outputs
    assert probabilities.shape == (3, 3) and probabilities.dtype == np.float32
    assert classes.shape == (3, 3) and classes.dtype == np.int64
    assert np.all(probabilities[:, 0] >= probabilities[:, 1])  # top-k is sorted
    # Each image's answer does not depend on its batch mates.
    alone = client.infer("img", images[1])
    np.testing.assert_allclose(alone[0][0], probabilities[1], rtol=1e-4, atol=1e-6)
    assert alone[1][0].tolist() == classes[1].tolist()


def test_a_corrupt_image_raises_invalid_argument_naming_the_item(client):
    good = _jpeg(32, 32, 3)
    with pytest.raises(torchfarm.InvalidArgument, match=r"inputs\[0\] item 1: .*JPEG"):
        client.infer("img", [good, b"\xff\xd8 this is not a picture"])
    assert client.infer("img", [good])[1].shape == (1, 3)
