# SPDX-License-Identifier: Apache-2.0
"""Rich types from type hints: dataclasses, bytes, numpy arrays and PIL images."""

from dataclasses import dataclass

import numpy as np
from PIL import Image

from ucall import Server
from ucall.client import Client

server = Server(port=0)


@dataclass
class Box:
    width: float
    height: float


@server
def area(box: Box) -> float:
    return box.width * box.height


@server
def checksum(data: bytes) -> int:
    return sum(data) % 65536


@server
def normalize(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.abs(matrix).max()


@server
def thumbnail(image: Image.Image, size: int = 16) -> Image.Image:
    image.thumbnail((size, size))
    return image


with server, Client(port=server.port) as client:
    print("area:", client.area(box={"width": 2, "height": 3.5}).json)
    print("checksum:", client.checksum(b"\x01\x02\x03").json)
    print("normalize:", client.normalize(np.array([[1.0, -4.0], [2.0, 0.5]])).numpy.tolist())
    picture = Image.new("RGB", (64, 48), (200, 30, 30))
    print("thumbnail:", client.thumbnail(picture, 16).image.size)
