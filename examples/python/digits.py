# SPDX-License-Identifier: Apache-2.0
"""A model served with dynamic batching: handwritten digits (scikit-learn's bundled data
set) classified by a small model trained at start.

Callers send one image each, ``classify(image) -> int``; the server groups the calls of
all its callers and runs the model once per batch. The client below sends the held-out
images from many threads at once and prints the accuracy and the throughput.

    python examples/python/digits.py [--callers 32]
"""

from __future__ import annotations

import argparse
import io
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.svm import SVC

from ucall import Server
from ucall.client import Client

digits = load_digits()  # 1,797 images of 8x8 pixels, values 0 to 16
train_x, test_x, train_y, test_y = train_test_split(
    digits.images, digits.target, test_size=0.25, random_state=0, stratify=digits.target
)
model = SVC(gamma=0.001).fit(train_x.reshape(len(train_x), -1), train_y)

server = Server(port=0, quiet=True)


@server.batch(max_size=64, max_wait_ms=5)
def classify(image: list[Image.Image]) -> list[int]:
    """The digit (0 to 9) an 8x8 grayscale image shows."""
    pixels = np.stack([np.asarray(picture.convert("L"), dtype=np.float32) for picture in image])
    return model.predict(pixels.reshape(len(image), -1) * (16.0 / 255.0)).tolist()


def as_png(pixels: np.ndarray) -> Image.Image:
    """An image as a client would have it: 8-bit grayscale, read from a PNG file."""
    file = io.BytesIO()
    Image.fromarray(np.round(pixels * (255.0 / 16.0)).astype(np.uint8), mode="L").save(file, format="PNG")
    return Image.open(io.BytesIO(file.getvalue()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callers", type=int, default=32, help="client threads, each with its connection")
    callers = parser.parse_args().callers
    images = [as_png(pixels) for pixels in test_x]
    with server:
        clients = [Client(port=server.port) for _ in range(callers)]

        def send(share: int) -> list[tuple[int, int]]:
            client = clients[share]
            return [(i, client.classify(images[i]).json) for i in range(share, len(images), callers)]

        started = time.perf_counter()
        with ThreadPoolExecutor(callers) as pool:
            answers = dict(pair for share in pool.map(send, range(callers)) for pair in share)
        elapsed = time.perf_counter() - started
        for client in clients:
            client.close()
        stats = server.batch_stats()["classify"]
    correct = sum(answers[i] == int(label) for i, label in enumerate(test_y))
    print(f"accuracy: {correct / len(test_y):.3f} ({correct} of {len(test_y)} test images)")
    print(f"throughput: {len(images) / elapsed:,.0f} calls/s from {callers} callers")
    print(f"batched: {stats['calls']} calls in {stats['batches']} batches, {stats['calls'] / stats['batches']:.1f} a batch")


if __name__ == "__main__":
    main()
